"""A tiny random-weight Llama that vLLM's CPU build can serve, for tests and `slokit demo`.

Real vLLM, real scheduler, real stats objects, but a model small enough (about 360k parameters) to prefill and
decode in milliseconds on two CPU cores. The shape is the smallest that vLLM 0.32's CPU attention accepts
(head_dim 64; 16 fails with "Unsupported CPU attention configuration"). The tokenizer is byte-level BPE with no
merges, so one prompt byte is one prompt token: a test that sends 100 ASCII characters knows the engine sees 100
prompt tokens (plus the BOS token, which `add_bos` controls in `prompt_token_count`).

What it writes is printable ASCII: the output layer scores only the printable bytes and EOS, so every sampled token
is one character of text. With a uniform random head half the sampled bytes were above 0x7F, partial UTF-8 that
vLLM's detokenizer holds back, and a short response could stream no text at all (a `no_content` failure in the
probe that said nothing about the code under test).

The directory is cached by content: its name is a hash of everything that goes into it, and a marker file is
written last, so a half-built directory (a crash, two builders at once) is never used and the model is built
once per cache directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

BOS_ID: Final = 256
EOS_ID: Final = 257
VOCAB_SIZE: Final = 258
PRINTABLE_IDS: Final = range(ord(" "), ord("~") + 1)  # the byte tokens the model writes (one token, one character)
# The head's weights for PRINTABLE_IDS and EOS are scaled so their logits spread by about 9 (the init's 0.02 gives
# about 0.2, near-uniform sampling over the vocabulary); every other row is zero (logit 0). The zero-logit tokens'
# share of the probability is then below 1e-6, and EOS stays one choice among about a hundred.
_HEAD_SCALE: Final = 40.0
_MARKER: Final = ".slokit-tiny-model-complete"
_BUILD_VERSION: Final = 2  # bump when the build changes in a way the settings below do not capture


@dataclass(frozen=True)
class TinyModelSettings:
    """Everything that determines the model's bytes (and so its cache key)."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    max_position_embeddings: int = 2048
    seed: int = 0
    dtype: str = "bfloat16"

    def digest(self) -> str:
        """Short content hash of the settings and build version."""
        text = json.dumps({"build": _BUILD_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    """Where built models are kept: `$SLOKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/slokit`, else ~/.cache/slokit."""
    if env := os.environ.get("SLOKIT_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slokit"


def prompt_token_count(text: str, add_bos: bool = True) -> int:
    """Prompt tokens the tiny model's tokenizer gives for `text` (one per UTF-8 byte, plus BOS)."""
    return len(text.encode("utf-8")) + (1 if add_bos else 0)


def build_tiny_model(cache_dir: Path | None = None, settings: TinyModelSettings | None = None) -> Path:
    """Build (or reuse) the tiny model and return its directory, ready for `--model DIR`."""
    settings = settings or TinyModelSettings()
    root = cache_dir if cache_dir is not None else default_cache_dir()
    target = root / f"tiny-llama-{settings.digest()}"
    if (target / _MARKER).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-llama-", dir=root))
    try:
        _write_model(staging, settings)
        (staging / _MARKER).write_text(settings.digest() + "\n", encoding="utf-8")
        try:
            staging.rename(target)
        except OSError:
            # Another builder finished first; its directory is complete (the marker is written before rename).
            if not (target / _MARKER).is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_model(directory: Path, settings: TinyModelSettings) -> None:
    # Heavy imports stay inside: importing slokit.local must not pull torch in.
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {_byte_token(i): i for i in range(256)}
    vocab["<s>"] = BOS_ID
    vocab["</s>"] = EOS_ID
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
        add_bos_token=True,
    )
    # A minimal chat template, so /v1/chat/completions works: role and content, one line each.
    fast.chat_template = (
        "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    fast.save_pretrained(directory)
    _force_bos(directory)

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_hidden_layers,
        num_attention_heads=settings.num_attention_heads,
        num_key_value_heads=settings.num_key_value_heads,
        max_position_embeddings=settings.max_position_embeddings,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
        tie_word_embeddings=False,
    )
    torch.manual_seed(settings.seed)
    model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    with torch.no_grad():
        head = model.lm_head.weight
        written = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
        written[list(PRINTABLE_IDS)] = True
        written[EOS_ID] = True
        head[written] *= _HEAD_SCALE
        head[~written] = 0.0
    model = model.to(getattr(torch, settings.dtype))
    model.save_pretrained(directory)


def _force_bos(directory: Path) -> None:
    """Make the saved tokenizer prepend BOS, so prompt lengths are `bytes + 1` whatever the loader."""
    path = directory / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": {"id": "<s>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [BOS_ID], "tokens": ["<s>"]}},
    }
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def _byte_token(byte: int) -> str:
    """The ByteLevel pre-tokenizer's printable spelling of one byte (GPT-2's bytes_to_unicode)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    if byte in printable:
        return chr(byte)
    offset = sum(1 for b in range(byte) if b not in printable)
    return chr(256 + offset)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        print(build_tiny_model())
