"""A tiny random Qwen3-VL model and its processor, built offline (no download, no torchvision).

    python examples/tiny_qwen3_vl.py /tmp/tiny-qwen3-vl     # writes the config, weights and tokenizer

For running ``examples/trl_environment.py`` on a CPU: a real ``Qwen3VLForConditionalGeneration`` (vision
tower included: 2 layers, hidden size 32, about 0.15 M parameters in all) whose processor is a real
``Qwen3VLProcessor`` with Qwen2-VL's image processor (patch 16, merge 2, as Qwen3-VL's) and TRL's copy of
the Qwen3-VL chat template, so TRL recognises it: it adds Qwen3's tool-call parser and its prefix-preserving
training template. The tokenizer is byte-level with no merges (every byte is one token) plus Qwen's special
tokens, so any text round-trips without a trained vocabulary.

Qwen3-VL's processor also takes a video processor, which needs torchvision; :func:`load_processor` builds
the processor without one (images only), which is all the desktop examples use.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["SPECIAL_TOKENS", "build_tiny_qwen3_vl", "load_processor"]

#: Qwen's special tokens (ids after the 256 byte tokens, in this order).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
#: Added (non-special) tokens of Qwen's vocabulary that its tool-call format uses.
ADDED_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")


def _image_only_processor_class() -> Any:
    from transformers import Qwen3VLProcessor

    class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):  # type: ignore[misc]
        """``Qwen3VLProcessor`` without its video processor (which needs torchvision)."""

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kw: Any):
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kw)  # type: ignore[no-untyped-call]

    return ImageOnlyQwen3VLProcessor


def _tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_vl_chat_template

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={char: i for i, char in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        pad_token=SPECIAL_TOKENS[0],
        eos_token="<|im_end|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
    )
    tokenizer.add_tokens(list(ADDED_TOKENS))
    tokenizer.chat_template = qwen3_vl_chat_template
    return tokenizer


def load_processor(path: str | Path) -> Any:
    """The processor of a model written by :func:`build_tiny_qwen3_vl` (images only, no torchvision)."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(path)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(path)
    return _image_only_processor_class()(image_processor, tokenizer, chat_template=tokenizer.chat_template)


def build_tiny_qwen3_vl(
    path: str | Path, *, hidden_size: int = 32, layers: int = 2, max_pixels: int = 320 * 240, seed: int = 0
) -> Path:
    """Write a tiny random ``Qwen3VLForConditionalGeneration``, its tokenizer and image processor to ``path``.

    Args:
        path: the output directory (created).
        hidden_size: width of the text model and of the vision tower.
        layers: layers of each.
        max_pixels: largest image area the image processor keeps (a 320x240 screenshot is 70 image tokens).
        seed: torch seed of the random weights.

    Returns:
        ``path``.
    """
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    tokenizer.save_pretrained(out)
    Qwen2VLImageProcessorPil(
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=32 * 32,
        max_pixels=max_pixels,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    ).save_pretrained(out)

    def token(name: str) -> int:
        return int(tokenizer.convert_tokens_to_ids(name))

    heads = 2
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": 1,
            "head_dim": hidden_size // heads,
            "max_position_embeddings": 32768,
            # the mrope sections (temporal, height, width) split head_dim / 2 rotary frequencies
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": _mrope_sections(hidden_size // heads),
                "mrope_interleaved": True,
            },
            "pad_token_id": token("<|endoftext|>"),
            "eos_token_id": token("<|im_end|>"),
        },
        vision_config={
            "depth": layers,
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_heads": heads,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": hidden_size,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": [layers - 1],
        },
        image_token_id=token("<|image_pad|>"),
        video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = token("<|im_end|>")
    model.generation_config.pad_token_id = token("<|endoftext|>")
    model.save_pretrained(out)
    return out


def _mrope_sections(head_dim: int) -> list[int]:
    half = head_dim // 2
    temporal = half // 4
    height = (half - temporal) // 2
    return [temporal, height, half - temporal - height]


if __name__ == "__main__":
    print(build_tiny_qwen3_vl(sys.argv[1] if len(sys.argv) > 1 else "tiny-qwen3-vl"))
