"""classify, eval and calibrate run the router's own signal and decision code (here with the
real bundled encoder and an embedding signal) and report what it decided."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from extproc.cli import main

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONFIG = """
providers:
  defaults: {model: general}
  models:
    - {name: general, provider_model_id: m/general, backend_refs: [{name: a, endpoint: "h:9"}]}
    - {name: billing, provider_model_id: m/billing, backend_refs: [{name: b, endpoint: "h:9"}]}
    - {name: weather, provider_model_id: m/weather, backend_refs: [{name: c, endpoint: "h:9"}]}
signals:
  - name: topic
    type: embedding
    threshold: 0.35
    examples:
      billing: ["my invoice is wrong", "refund my last payment", "update my credit card on file"]
      weather: ["will it rain tomorrow", "weather forecast for the weekend", "is it sunny today"]
  - {name: urgent, type: keyword, keywords: [urgent]}
decisions:
  - {name: billing, priority: 20, rules: {signal: topic, label: billing}, model: billing}
  - {name: weather, priority: 10, rules: {signal: topic, label: weather}, model: weather}
  - {name: escalate, priority: 5, mode: shadow, rules: {signal: urgent}, model: billing}
"""
DATA = [
    {"text": "I was charged twice, please refund me", "label": "billing",
     "expect_decision": "billing"},
    {"text": "my card payment failed on the invoice", "label": "billing",
     "expect_model": "billing"},
    {"text": "do I need an umbrella tomorrow?", "label": "weather", "expect_decision": "weather"},
    {"messages": [{"role": "user", "content": "how hot will it be this weekend"}],
     "label": "weather", "expect_model": "weather"},
    {"text": "tell me a joke about cats", "expect_decision": "default"},
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("policy")
    config = root / "router.yaml"
    config.write_text(CONFIG)
    data = root / "labelled.jsonl"
    data.write_text("\n".join(json.dumps(line) for line in DATA) + "\n")
    return config, data


def test_classify_json(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = files
    assert main(["classify", "--config", str(config), "--json",
                 "URGENT: my invoice total is wrong, refund it"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["decision"] == "billing"
    assert result["model"] == "billing"
    assert result["signals"]["topic"]["label"] == "billing"
    assert result["signals"]["urgent"]["matched"] is True
    assert result["matched_decisions"] == ["billing", "escalate"]


def test_classify_table_with_messages(files: tuple[Path, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = files
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is the weather forecast for saturday?"}]))
    assert main(["classify", "--config", str(config), "--messages", str(messages)]) == 0
    out = capsys.readouterr().out
    assert "decision: weather  ->  model: weather" in out
    assert "topic" in out


def test_eval_report_and_plot(files: tuple[Path, Path], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    config, data = files
    plot = tmp_path / "confusion.png"
    assert main(["eval", "--config", str(config), "--data", str(data), "--signal", "topic",
                 "--json", "--plot", str(plot)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["examples"] == 5
    assert report["label"]["accuracy"] == 1.0
    assert report["label"]["labels"]["billing"] == {"precision": 1.0, "recall": 1.0,
                                                    "support": 2}
    assert report["decision"]["accuracy"] == 1.0
    assert report["model"]["count"] == 2
    assert report["decisions"] == {"billing": 2, "weather": 2, "default": 1}
    assert report["latency_ms"]["p50"] > 0
    assert report["signal_errors"] == {}
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert main(["eval", "--config", str(config), "--data", str(data), "--signal",
                 "topic"]) == 0
    table = capsys.readouterr().out
    assert "accuracy 1.0000" in table
    assert "confusion" in table


def test_calibrate_suggests_a_threshold(files: tuple[Path, Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    config, data = files
    assert main(["calibrate", "--config", str(config), "--data", str(data), "--signal", "urgent",
                 "--positive", "billing", "--target-fpr", "0.5", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["positives"] == 2
    assert result["negatives"] == 2
    assert result["suggested"]["fpr"] <= 0.5
    assert {"threshold", "recall", "fpr", "precision"} <= set(result["tradeoff"][0])


KEYWORD_CONFIG = """
providers:
  defaults: {model: general}
  models:
    - {name: general, provider_model_id: m/general, backend_refs: [{name: a, endpoint: "h:9"}]}
signals:
  - {name: urgent, type: keyword, keywords: [urgent]}
decisions:
  - {name: escalate, rules: {signal: urgent}, model: general}
"""


@pytest.mark.parametrize(("argv", "words"), [
    (["classify", "--messages", "{missing}"], "No such file"),
    (["classify", "--messages", "{broken}"], "Expecting value"),
    (["classify", "--messages", "{not_messages}"], "must be an object"),
    (["eval", "--data", "{missing}"], "No such file"),
    (["eval", "--data", "{broken}"], "needs 'text' or 'messages'"),
    (["eval", "--data", "{not_messages}"], "odd.json:1: messages[0] must be an object"),
    (["eval", "--data", "{no_content}"], "no_content.jsonl:2: messages[0].content must be"),
    (["eval", "--data", "{data}", "--signal", "nope"], "unknown signal 'nope'"),
    (["calibrate", "--data", "{missing}", "--signal", "urgent"], "No such file"),
    (["calibrate", "--data", "{data}", "--signal", "urgent"], "both positive and negative"),
])
def test_bad_inputs_are_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    """A missing or malformed input file is an ``error:`` line and exit 1, not a traceback."""
    config = tmp_path / "router.yaml"
    config.write_text(KEYWORD_CONFIG)
    paths = {"missing": tmp_path / "missing.json", "broken": tmp_path / "broken.json",
             "not_messages": tmp_path / "odd.json", "data": tmp_path / "data.jsonl",
             "no_content": tmp_path / "no_content.jsonl"}
    paths["broken"].write_text("not json\n")
    paths["not_messages"].write_text('{"messages": [1]}\n' if argv[0] != "classify"
                                     else "[1]\n")
    paths["data"].write_text('{"text": "urgent", "label": "a"}\n')
    # the second example's message has no content
    paths["no_content"].write_text('{"text": "urgent"}\n{"messages": [{"role": "user"}]}\n')
    args = [part.format(**{k: str(v) for k, v in paths.items()}) for part in argv]
    assert main([*args, "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err, err
    assert "Traceback" not in err
