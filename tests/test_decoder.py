"""The pretrained decoder (helpers.models.decoder): set up by course.py, loaded offline, float32.

Set-up converts it in every environment course.py makes (CI's included), so the tests that load it
run there; they share one load per process (helpers.models caches it)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import models

ROOT = Path(__file__).resolve().parent.parent


def test_course_py_installs_the_wheel_the_loader_names():
    source = (ROOT / "course.py").read_text()
    assert f'DECODER_WHEEL = "{models.DECODER_WHEEL}"' in source
    assert f'DECODER = VENV / "{models.decoder_dir().name}"' in source


def test_a_missing_set_up_says_what_to_run(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "decoder_dir", lambda: tmp_path / "not-converted")
    models.decoder.cache_clear()
    try:
        assert not models.decoder_available()
        with pytest.raises(FileNotFoundError, match=re.escape("run `python3 course.py setup`")):
            models.decoder()
    finally:
        models.decoder.cache_clear()


def test_the_decoder_loads_offline_in_float32_eval_mode():
    """In a fresh process: nothing is downloaded (HF_HUB_OFFLINE is set by the loader itself, and the
    hub's address is made unreachable besides), and no quantisation survives in the config."""
    code = (
        "import os; os.environ['HF_ENDPOINT'] = 'http://127.0.0.1:9'\n"
        "from helpers import models\n"
        "model, tokenizer = models.decoder()\n"
        "assert os.environ['HF_HUB_OFFLINE'] == '1'\n"
        "assert model.lm_head.weight is model.model.embed_tokens.weight, 'tied, as published'\n"
        "assert not hasattr(model.config, 'quantization_config')\n"
        "print(model.dtype, model.training, {p.dtype for p in model.parameters()}, model.config.num_hidden_layers)\n"
        "print(tokenizer.decode(tokenizer('The capital of France').input_ids))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["torch.float32 False {torch.float32} 30", "The capital of France"]


def test_the_decoder_knows_the_capital_of_france():
    """Trained weights, not random ones: the greedy answer to an obvious question."""
    model, tokenizer = models.decoder()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, return_tensors="pt"
    )["input_ids"]
    with torch.no_grad():
        answer = model.generate(prompt, max_new_tokens=8, do_sample=False)
    assert tokenizer.decode(answer[0, prompt.shape[1] :]).startswith("The capital of France is Paris")
