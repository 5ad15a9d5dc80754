"""johnma2006/mamba-minimal: model.py, Mamba in one file.

As its README and demo.ipynb use it: Mamba.from_pretrained(name) (the Hugging Face `config.json`
and `pytorch_model.bin` of a state-spaces checkpoint, whose keys start with `backbone.`), then
the notebook's generate(): model.eval(), logits of the last position under torch.no_grad(),
top-k filtering of the softmax, sampling or argmax, the sequence grown by one token a step. The
README states equal forward and backward outputs to the official implementation, so a training
step (next-token cross-entropy, backward, AdamW) on two (batch, length) sizes is run too.

No network here: `transformers.utils` / `transformers.utils.hub` are stand-in modules while
from_pretrained runs, whose `cached_file` returns the files of a tiny checkpoint written to a
temporary folder in the hub's format.
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F


def _generate(model: torch.nn.Module, input_ids: torch.Tensor, n_tokens_to_gen: int, sample: bool, top_k: int | None) -> torch.Tensor:
    # demo.ipynb generate(), on token ids instead of a tokenizer's output
    model.eval()
    for _ in range(n_tokens_to_gen):
        with torch.no_grad():
            next_token_logits = model(input_ids)[:, -1]
        probs = F.softmax(next_token_logits, dim=-1)
        if top_k is not None:
            values, _indices = torch.topk(probs, k=top_k)
            probs[probs < values[:, -1, None]] = 0
            probs = probs / probs.sum(axis=1, keepdims=True)
        if sample:
            next_indices = torch.multinomial(probs, num_samples=1)
        else:
            next_indices = torch.argmax(probs, dim=-1)[:, None]
        input_ids = torch.cat([input_ids, next_indices], dim=1)
    return input_ids


def _train(model: torch.nn.Module, vocab: int, sizes: tuple[tuple[int, int], ...]) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for b, t in sizes:
        tokens = torch.randint(0, vocab, (b, t + 1))
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _from_pretrained(ns: dict[str, Any], folder: Path, d_model: int, n_layer: int, vocab_size: int) -> torch.nn.Module:
    # a checkpoint as the hub holds it: the backbone's weights under `backbone.`
    source = ns["Mamba"](ns["ModelArgs"](d_model=d_model, n_layer=n_layer, vocab_size=vocab_size))
    state = {f"backbone.{k}" if not k.startswith("lm_head") else k: v for k, v in source.state_dict().items()}
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps({"d_model": d_model, "n_layer": n_layer, "vocab_size": vocab_size}))

    def cached_file(model_name: str, filename: str, _raise_exceptions_for_missing_entries: bool = True) -> str:
        assert model_name == "state-spaces/mamba-tiny"
        return str(folder / filename)

    utils = types.ModuleType("transformers.utils")
    utils.WEIGHTS_NAME, utils.CONFIG_NAME = "pytorch_model.bin", "config.json"
    hub = types.ModuleType("transformers.utils.hub")
    hub.cached_file = cached_file
    package = types.ModuleType("transformers")
    package.utils, utils.hub = utils, hub
    stand_ins = {"transformers": package, "transformers.utils": utils, "transformers.utils.hub": hub}
    saved = {k: sys.modules.get(k) for k in stand_ins}
    sys.modules.update(stand_ins)
    try:
        return ns["Mamba"].from_pretrained("state-spaces/mamba-tiny")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _mamba_model(ns: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # vocab 21 is padded to 24 (pad_vocab_size_multiple 8); dt_rank 'auto' = ceil(16 / 16)
        model = _from_pretrained(ns, Path(tmp), d_model=16, n_layer=2, vocab_size=21)
    _generate(model, torch.randint(0, 21, (1, 3)), n_tokens_to_gen=4, sample=True, top_k=5)
    _generate(model, torch.randint(0, 21, (2, 2)), n_tokens_to_gen=3, sample=False, top_k=None)
    _train(model, 21, ((2, 5), (3, 7)))
    # explicit dt_rank and state size, an unpadded vocabulary, biases in the projections
    args = ns["ModelArgs"](d_model=12, n_layer=2, vocab_size=16, d_state=4, expand=3, dt_rank=3, d_conv=3, bias=True)
    model = ns["Mamba"](args)
    _train(model, 16, ((3, 4), (2, 6)))
    _generate(model, torch.randint(0, 16, (2, 4)), n_tokens_to_gen=3, sample=True, top_k=4)


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {"mamba_minimal_model": _mamba_model}
