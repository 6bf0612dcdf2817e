"""A tiny random Qwen2 model and a tokenizer whose ids are the reference policy server's ids, built offline.

    python examples/tiny_qwen.py /tmp/tiny-qwen      # writes config, weights and tokenizer; no download

For running the trainer examples on a CPU against legato's reference policy server
(``legato_rl.testing.ReferencePolicyServer``). That server tokenizes with its own toy tokenizer
(``legato_rl.testing.tokenizer``): special tokens 1..6 with Qwen's names, and every text piece hashed into
``[64, 151643)``. Rather than map those ids onto a small vocabulary, the model's vocabulary covers them
(``vocab_size = 151643``, Qwen2's own size) and the tokenizer gives each known piece the id the server
gives it, so the ids the trainer trains on are exactly the ids the server returned, as they would be with a
real model behind vLLM. The model stays small (hidden size 32, 2 layers, about 5 M parameters, nearly all of
them the tied embedding).

The model is text-only: TRL 1.16's ``rollout_func`` path does not pass screenshots to the training forward
pass, so image placeholder tokens reach the model as ordinary tokens either way. For the
``environment_factory`` path, where the screenshots do reach training, ``tiny_qwen3_vl.py`` builds a VLM.
"""

from __future__ import annotations

import sys
from pathlib import Path

from legato_rl.harness.qwen import build_system_prompt
from legato_rl.testing.tokenizer import SPECIAL_TOKENS, VOCAB_SIZE, ToyTokenizer

__all__ = ["PAD", "build_tiny_qwen"]

#: Id 0 is unused by the toy tokenizer; the tiny tokenizer pads with it.
PAD = "<|pad|>"

# Text whose pieces get readable decodings (ids not in the vocabulary decode to nothing).
_KNOWN_TEXT = (
    build_system_prompt(),
    "Please generate the next move according to the UI screenshot, instruction and previous actions.",
    'Action: Click the text field. Type "banana" into the text field and press Enter. Click the button labelled',
    '<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [158, 512]}}\n'
    '</tool_call>\n{"action": "terminate", "status": "success"} {"action": "type", "text": "x"} '
    '{"action": "key", "keys": ["enter"]} failure The task is done. I do not know this task. user assistant system',
)


def build_tiny_qwen(path: str | Path, *, hidden_size: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Write a tiny random ``Qwen2ForCausalLM`` and its tokenizer to ``path``; returns ``path``."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    toy = ToyTokenizer()
    vocab = {PAD: 0, **{name: token_id for token_id, name in SPECIAL_TOKENS.items()}}
    for text in _KNOWN_TEXT:
        for piece in toy.pieces(text):
            vocab.setdefault(piece, toy.piece_id(piece))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s*\w+|\s*[^\w\s]|\s+"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # pieces carry their own leading whitespace
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=SPECIAL_TOKENS[2],  # <|im_end|>, which ends every reply of the server
        additional_special_tokens=[name for token_id, name in sorted(SPECIAL_TOKENS.items()) if token_id != 2],
    )
    tokenizer.save_pretrained(out)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=None,
    )
    Qwen2ForCausalLM(config).save_pretrained(out)
    return out


if __name__ == "__main__":
    print(build_tiny_qwen(sys.argv[1] if len(sys.argv) > 1 else "tiny-qwen"))
