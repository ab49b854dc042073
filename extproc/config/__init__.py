"""Router configuration: pydantic schema at the YAML boundary, a frozen runtime object after."""

from extproc.config.loader import ConfigError, load_config, load_config_text
from extproc.config.runtime import RouterConfig

__all__ = ["ConfigError", "RouterConfig", "load_config", "load_config_text"]
