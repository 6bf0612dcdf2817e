"""examples/trl_environment.py: GRPO through TRL's environment_factory trains a VLM on desktop screenshots.

Needs TRL 1.16, torch and transformers (``pip install torch==2.13.0`` then ``pip install -e '.[examples]'``);
it builds a tiny random Qwen3-VL offline (``examples/tiny_qwen3_vl.py``). The adapter itself
(``legato_rl.integrations.trl_environment``) is tested without a trainer in tests/rl/test_trl_environment.py.
"""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_grpo_trains_a_tiny_vlm_on_desktop_screenshots(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch", reason="needs torch: pip install torch==2.13.0, then pip install -e '.[examples]'")
    pytest.importorskip("trl", reason="needs TRL 1.16: pip install -e '.[examples]'")
    from trl_environment import main

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    summary = main(["--model", "tiny", "--steps", "2", "--tasks", "fake-click-save", "fake-type-banana"])

    assert summary["optimizer_steps"] == 2
    assert summary["episodes"] == 4  # 2 steps x 1 task x 2 generations
    assert summary["reward_mean"] == 0.5  # each group: one solved, one given up
    # every training forward pass carried pixels, and every screenshot the desktops returned was in them
    assert summary["training_passes"] >= 2
    assert summary["training_passes_with_pixels"] == summary["training_passes"]
    assert summary["training_images"] == summary["screenshots_returned"] >= 6
    # TRL drops all pixels of a batch whose image tokens do not match the features: they matched
    assert summary["training_image_tokens"] == summary["training_image_features"] > 0
    assert summary["vision_parameters_moved"] > 0  # the loss's gradient went through the screenshots
