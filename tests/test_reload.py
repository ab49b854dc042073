"""``ConfigReloader.reload_now`` (what SIGHUP calls): the same path as the file watcher, but
applied at once even when the file looks unchanged; a missing file is reported every time it
is asked for; a reload and a watcher check never apply at the same time."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from extproc.config import RouterConfig, load_config_text
from extproc.metrics import RouterMetrics
from extproc.reload import ConfigReloader

CONFIG = """
providers:
  defaults: {model: general}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{name: g, endpoint: "127.0.0.1:8000"}]
"""


WORKER = {"worker_id": "w1", "worker_type": "nvidia-gpu", "runtime": "cuda",
          "runtime_endpoint": "http://127.0.0.1:8002/v1", "supported_models": ["general"],
          "runtime_config": {"transport": "openai"}}


class Applied:
    def __init__(self) -> None:
        self.configs: list[RouterConfig] = []
        self.running = 0
        self.overlapped = False

    async def __call__(self, config: RouterConfig) -> None:
        self.running += 1
        self.overlapped |= self.running > 1
        await asyncio.sleep(0.05)
        self.configs.append(config)
        self.running -= 1


@pytest.fixture
def path(tmp_path: Path) -> Path:
    file = tmp_path / "router.yaml"
    file.write_text(CONFIG)
    return file


def _reloader(path: Path, apply: Applied) -> tuple[ConfigReloader, RouterMetrics]:
    metrics = RouterMetrics()
    return ConfigReloader(path, load_config_text(CONFIG), apply, metrics,
                          logging.getLogger("test.reload")), metrics


async def test_reload_now_applies_an_unchanged_file(path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    apply = Applied()
    reloader, metrics = _reloader(path, apply)
    caplog.set_level(logging.INFO, "test.reload")
    assert await reloader.check_once() == "unchanged"
    assert await reloader.reload_now("SIGHUP") == "applied"
    assert len(apply.configs) == 1
    assert await reloader.check_once() == "unchanged"  # the watcher does not apply it again
    messages = [(r.getMessage(), getattr(r, "trigger", None)) for r in caplog.records]
    assert ("config reload requested", "SIGHUP") in messages
    assert ("config reloaded", "SIGHUP") in messages
    assert 'semantic_router_config_reloads_total{result="ok"} 1.0' in \
        metrics.exposition().decode()


async def test_reload_now_keeps_the_old_config_on_a_bad_or_missing_file(path: Path) -> None:
    apply = Applied()
    reloader, metrics = _reloader(path, apply)
    path.write_text(CONFIG.replace("model: general}", "model: nowhere}"))
    assert await reloader.reload_now("SIGHUP") == "failed"
    path.unlink()
    assert await reloader.reload_now("SIGHUP") == "failed"
    assert await reloader.reload_now("SIGHUP") == "failed"  # asked again: said again
    assert await reloader.check_once() == "unchanged"  # the watcher said it once already
    assert apply.configs == []
    assert 'semantic_router_config_reloads_total{result="failed"} 3.0' in \
        metrics.exposition().decode()


async def test_reload_now_and_the_watcher_never_overlap(path: Path) -> None:
    apply = Applied()
    reloader, _ = _reloader(path, apply)
    path.write_text(CONFIG + "\n# edited\n")
    results = await asyncio.gather(reloader.check_once(), reloader.reload_now("SIGHUP"))
    assert results == ["applied", "applied"] and not apply.overlapped


@pytest.mark.parametrize(("addition", "envoy", "restart"), [
    ("router: {message_timeout_ms: 9000}\n", True, []),     # Envoy's ext_proc timeout
    ("router: {health_check_path: /ping}\n", True, []),     # Envoy's health checks
    ("router: {admin: '127.0.0.1:8181'}\n", False, ["router.admin"]),
    ("router: {on_overload: reject}\n", False, []),         # the router's own: applied
    (f"workers: [{json.dumps(WORKER)}]\n", True, ["workers"]),  # static clusters; registry
])
async def test_a_reload_says_what_it_cannot_apply(
    path: Path, caplog: pytest.LogCaptureFixture, addition: str, envoy: bool,
    restart: list[str],
) -> None:
    """A change the running Envoy or the running servers cannot take is said, not dropped
    silently: the Envoy-facing check compares the rendered Envoy configs."""
    reloader, _ = _reloader(path, Applied())
    caplog.set_level(logging.INFO, "test.reload")
    path.write_text(CONFIG + addition)
    assert await reloader.reload_now("SIGHUP") == "applied"
    (reloaded,) = [r for r in caplog.records if r.getMessage() == "config reloaded"]
    assert reloaded.envoy_config_changed is envoy  # type: ignore[attr-defined]
    warned = [r for r in caplog.records if r.getMessage().startswith("these settings")]
    assert [getattr(r, "settings", None) for r in warned] == ([restart] if restart else [])


async def test_state_dir_from_the_command_line_is_compared_as_applied(
        path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``serve --state-dir DIR`` overrides the file's ``router.state_dir`` in every reload:
    an unchanged file is no restart-only change, and the applied config keeps DIR."""
    apply = Applied()
    state = str(tmp_path / "state")
    reloader = ConfigReloader(path, load_config_text(CONFIG), apply, RouterMetrics(),
                              logging.getLogger("test.reload"), state_dir=state)
    caplog.set_level(logging.INFO, "test.reload")
    assert await reloader.reload_now("SIGHUP") == "applied"
    assert await reloader.reload_now("SIGHUP") == "applied"
    assert [c.router.state_dir for c in apply.configs] == [state, state]
    assert not [r for r in caplog.records if r.getMessage().startswith("these settings")]


async def test_a_changed_workers_directory_is_named(path: Path, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "workers"
    folder.mkdir()
    (folder / "w1.json").write_text(json.dumps(WORKER))
    text = CONFIG + f"workers: {json.dumps(str(folder))}\n"
    path.write_text(text)
    reloader = ConfigReloader(path, load_config_text(text), Applied(), RouterMetrics(),
                              logging.getLogger("test.reload"))
    caplog.set_level(logging.INFO, "test.reload")
    (folder / "w1.json").write_text(json.dumps({**WORKER, "weight": 5}))
    assert await reloader.reload_now("SIGHUP") == "applied"
    warned = [r for r in caplog.records if r.getMessage().startswith("these settings")]
    assert [getattr(r, "settings", None) for r in warned] == [["workers"]]
