"""One forward pass for every session waiting on the local model: a batch of one-token steps.

Each session keeps a KV cache of its own (one row, any length): a back or a forced token crops
that row only, and the batch never holds a shared cache. A batched step feeds each row's last
token as one ``[rows, 1]`` input with each row's own position id, so the embeddings, the linear
layers and the head run once for every row; attention runs row by row on each row's own cache,
through an attention implementation registered here (with the GGUF kernels, every row's cache
write and attention in one call a layer). A one-token step, alone or in a batch,
attends through the batcher's ``attend`` when it has one (the GGUF kernels', within float error
of sdpa); anything else (a prompt, a model without it) through sdpa itself. A row's attention is
therefore the very computation it would make alone; only the batched matrix products differ
from a single row's, within float error. With the GGUF kernels' decoder, a one-token step, alone
or batched, skips the modules: the whole pass is one call (a row's sums the same in any batch).

Sessions are gathered without a thread of their own: whoever asks while the model is free runs
the batch for everyone waiting (the *leader*), in its own thread, and the others sleep until
their row is done. A leader waits briefly for as many rows as the last batch had (sessions in a
steady stream arrive one by one, a few milliseconds apart), never more than a share of the last
forward pass; a session alone runs at once, through the model's ordinary path.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from app.engine.kernels.gguf import Decoder, Slot

__all__ = [
    "PROMPT_CACHE_BYTES",
    "ROWS_ATTENTION",
    "BatchCounts",
    "Batcher",
    "GrowingLayer",
    "enable_rows",
]

#: The bytes of prompt caches a batcher keeps (keys, values and logits), least recently used out.
PROMPT_CACHE_BYTES = 256 * 1024 * 1024

#: The attention implementation a batched model runs with: sdpa (or the batcher's ``attend`` for
#: a one-token step), row by row in a batch.
ROWS_ATTENTION = "maskscope_rows"
_ROWS_KWARG = "maskscope_rows"
_ATTEND_KWARG = "maskscope_attend"
_ATTEND_ROWS_KWARG = "maskscope_attend_rows"

#: One query token's attention over a row's keys and values (``[1, 1, heads, dim]``), or None
#: for inputs it does not take: the GGUF kernels' :meth:`~app.engine.kernels.gguf.Kernels.attend`.
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor | None]
#: A batch's one-token attention, each row's cache write included, in one call (the GGUF
#: kernels' :meth:`~app.engine.kernels.gguf.Kernels.attend_rows`), or None for inputs it does
#: not take.
AttendRows = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, Sequence[Slot], float], torch.Tensor | None
]
_registered = threading.Lock()


def _rows_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    maskscope_rows: Sequence[DynamicCache] | None = None,
    maskscope_attend: Attend | None = None,
    maskscope_attend_rows: AttendRows | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    if maskscope_rows is None:
        return _attention(module, query, key, value, attention_mask, maskscope_attend, kwargs)
    if maskscope_attend_rows is not None and _plain(module, kwargs):
        out = _attend_rows(module, query, key, value, maskscope_rows, maskscope_attend_rows,
                           kwargs)  # fmt: skip
        if out is not None:
            return out, None
    outputs = []
    for row, cache in enumerate(maskscope_rows):
        # One query per row: it sees its whole cache, so the row needs no mask (none alone).
        keys, values = cache.update(key[row : row + 1], value[row : row + 1], module.layer_idx)
        out, _ = _attention(module, query[row : row + 1], keys, values, None, maskscope_attend,
                            kwargs)  # fmt: skip
        outputs.append(out)
    return torch.cat(outputs), None


def _attend_rows(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    rows: Sequence[DynamicCache],
    attend_rows: AttendRows,
    kwargs: dict[str, Any],
) -> torch.Tensor | None:
    """Every row's cache write and attention in one call, when each row's layer grows in place."""
    layers = []
    for cache in rows:
        layer = cache.layers[module.layer_idx]
        if type(layer) is not GrowingLayer or not layer.is_initialized or cache.offloading:
            return None
        layers.append(layer)
    one_key, one_value = key[:1], value[:1]  # for the shapes of a buffer that must grow
    slots = [layer.slot(one_key, one_value) for layer in layers]
    out = attend_rows(query, key, value, slots, kwargs.get("scaling") or module.scaling)
    if out is not None:
        for layer in layers:
            layer.advance()
    return out


def _attention(
    module: Any,
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    attend: Attend | None,
    kwargs: dict[str, Any],
) -> tuple[torch.Tensor, None]:
    """sdpa, or ``attend`` for one token's step over its whole cache (no mask, nothing else)."""
    if attend is not None and mask is None and query.shape[2] == 1 and _plain(module, kwargs):
        out = attend(query, keys, values, kwargs.get("scaling") or module.scaling)
        if out is not None:
            return out, None
    result: tuple[torch.Tensor, None] = sdpa_attention_forward(
        module, query, keys, values, mask, **kwargs
    )
    return result


def _plain(module: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the attention is a plain softmax of scaled scores (no dropout, cap or bias)."""
    return (
        not kwargs.get("dropout")
        and kwargs.get("softcap") is None
        and kwargs.get("position_bias") is None
        and kwargs.get("sliding_window") is None
        and kwargs.get("s_aux") is None
        and not getattr(module, "training", False)
    )


def enable_rows(module: Any) -> bool:
    """Switch ``module`` to row-by-row attention in batches if it can batch; idempotent.

    A model batches when it runs sdpa and every layer attends to the whole prefix (a sliding
    window needs a mask per row, which the rows' attention does not apply).

    Returns:
        Whether batched steps may be run on ``module``.
    """
    config = module.config
    if config._attn_implementation not in ("sdpa", ROWS_ATTENTION):
        return False
    text = config.get_text_config()
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        if any(kind != "full_attention" for kind in layer_types):
            return False
    elif getattr(text, "sliding_window", None) is not None:
        return False
    with _registered:
        AttentionInterface.register(ROWS_ATTENTION, _rows_attention)
        AttentionMaskInterface.register(ROWS_ATTENTION, sdpa_mask)
    try:
        module.set_attn_implementation(ROWS_ATTENTION)
    except (AttributeError, ValueError):
        return False
    return bool(config._attn_implementation == ROWS_ATTENTION)


def _capacity(length: int) -> int:
    """The room a layer's buffers grow to for ``length`` tokens: a quarter more, 64 at least."""
    return length + max(64, length // 4)


class GrowingLayer(DynamicLayer):  # type: ignore[misc]  # transformers is untyped
    """A cache layer whose keys and values are views of buffers with room to spare.

    ``DynamicLayer`` appends a token by concatenating: a copy of the whole layer at every step,
    for every session (O(total KV) a batch). Here a token is written in place and the buffers
    grow by a quarter when full (amortised O(1); the spare room stays under a fifth of them, so
    that a long prompt's cache is not half as large again once decoding starts); a crop is a
    shorter view of the same buffers, which the next token overwrites.

    A token a kernel wrote (:meth:`slot`, :meth:`advance`) is counted, and the views are made
    again only when read: a batch's step advances every layer of every row (240 views a step
    for 8 rows of 30 layers, 2 ms), and nothing reads them until a prompt or a back does.
    """

    _buffers: tuple[torch.Tensor, torch.Tensor] | None = None
    _buffers_bytes = 0  # counted once per growth: the memory budget reads it after every step
    _keys: torch.Tensor | None = None
    _values: torch.Tensor | None = None
    _advanced = 0  # tokens written by a kernel that the views do not show yet

    @property
    def keys(self) -> Any:  # a tensor once initialized (transformers' attribute is untyped)
        """The keys held, ``[1, kv_heads, tokens, dim]`` (a view of the buffers)."""
        if self._advanced:
            self._catch_up()
        return self._keys

    @keys.setter
    def keys(self, keys: Any) -> None:
        if self._advanced:
            self._catch_up()
        self._keys = keys

    @property
    def values(self) -> Any:
        """The values held, as :attr:`keys`."""
        if self._advanced:
            self._catch_up()
        return self._values

    @values.setter
    def values(self, values: Any) -> None:
        if self._advanced:
            self._catch_up()
        self._values = values

    def _catch_up(self) -> None:
        """The views made again over the tokens a kernel wrote."""
        assert self._buffers is not None and self._keys is not None
        length = self._held()
        self._advanced = 0
        keys, values = self._buffers
        self._keys, self._values = keys[:, :, :length], values[:, :, :length]

    def _held(self) -> int:
        keys = self._keys
        held = 0 if keys is None or keys.numel() == 0 else keys.shape[-2]
        return int(held + self._advanced)

    def get_seq_length(self) -> int:
        """The tokens held (a kernel's included), without making the views."""
        return self._held() if self.is_initialized else 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new keys and values; returns the layer's keys and values (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held = self.get_seq_length()
        length = held + key_states.shape[-2]
        if not self._fits(length):
            self._grow(key_states, value_states, held, _capacity(length))
        assert self._buffers is not None
        keys, values = self._buffers
        keys[:, :, held:length] = key_states
        values[:, :, held:length] = value_states
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]
        return self.keys, self.values

    def slot(self, key_states: torch.Tensor, value_states: torch.Tensor) -> Slot:
        """Room for one more token (the buffers grow as :meth:`update` would): the buffers'
        addresses, the tokens held and the buffers' head strides, for a kernel that writes the
        token itself; :meth:`advance` then counts it.

        Args:
            key_states, value_states: one token's (``[1, kv_heads, 1, dim]``), for the shapes.
        """
        held = self.get_seq_length()
        if not self._fits(held + 1):
            self._grow(key_states, value_states, held, _capacity(held + 1))
        assert self._buffers is not None
        keys, values = self._buffers
        return keys.data_ptr(), values.data_ptr(), held, keys.stride(1), values.stride(1)

    def advance(self) -> None:
        """Count the token a kernel wrote where :meth:`slot` said."""
        self._advanced += 1

    def _fits(self, length: int) -> bool:
        if self._buffers is None or self._buffers[0].shape[-2] < length:
            return False
        # The views must still be of these buffers (a reset or a reorder replaces them).
        keys = self._keys
        return bool(
            keys is not None
            and (keys.numel() == 0 or keys.data_ptr() == self._buffers[0].data_ptr())
        )

    def _grow(self, key: torch.Tensor, value: torch.Tensor, held: int, capacity: int) -> None:
        batch, heads, _, dim = key.shape
        keys = key.new_empty(batch, heads, capacity, dim)
        values = value.new_empty(batch, heads, capacity, value.shape[-1])
        if held:
            keys[:, :, :held] = self.keys
            values[:, :, :held] = self.values
        self._buffers = (keys, values)
        self._buffers_bytes = sum(t.numel() * t.element_size() for t in self._buffers)
        self._keys, self._values = keys[:, :, :held], values[:, :, :held]

    @property
    def held_bytes(self) -> int:
        """The bytes the layer's buffers hold (their room to spare included)."""
        return self._buffers_bytes


@dataclass(eq=False)
class _Row:
    """One session's step waiting for (or in) a batch."""

    cache: DynamicCache
    token_id: int
    logits: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False

    def result(self) -> torch.Tensor:
        if self.error is not None:
            raise self.error
        assert self.logits is not None
        return self.logits


@dataclass
class BatchCounts:
    """What the batcher has run: forward passes of steps and the rows they served, and the
    prompts it computed or copied from a session that had the same prompt before."""

    batches: int = 0
    rows: int = 0
    largest: int = 0
    prompts: int = 0
    prompts_reused: int = 0


@dataclass(frozen=True, eq=False)
class _KeptPrompt:
    """A prompt's keys and values (every layer, exactly its length) and its next-token logits."""

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    logits: torch.Tensor

    @property
    def nbytes(self) -> int:
        tensors = [t for pair in self.layers for t in pair] + [self.logits]
        return sum(t.numel() * t.element_size() for t in tensors)


class Batcher:
    """Runs the sessions' forward passes on one module: prompts alone, one-token steps batched.

    Thread-safe, and it assumes nothing of its callers' threads: a step's forward pass runs in
    the thread of whichever waiting caller leads its batch.

    Args:
        module: the causal LM (every session on it shares this batcher).
        device: where the module runs: the input ids go there.
        lock: held around each forward pass (prompts, batches: they take turns).
        max_rows: the most rows in one batch.
        gather_share: how long a leader may wait for more rows, as a share of the last forward
            pass (a short wait that pays for itself only when rows do come).
        max_gather_s: the cap on that wait, in seconds.
        prompt_cache_bytes: the bytes of prompts' keys and values kept for sessions that start
            from the same tokens (0: none kept).
        attend: the attention of each one-token step, alone or batched (sdpa when None or
            when it declines); a prompt's always runs sdpa.
        attend_rows: a batch's attention in one call, each row's cache write included (else
            ``attend`` row by row, after each row's cache update).
        decoder: every one-token step, alone or batched, in one call of the kernels when each
            row's cache grows in place (else through the module).
    """

    def __init__(
        self,
        module: Any,
        *,
        device: torch.device,
        lock: AbstractContextManager[Any],
        max_rows: int = 32,
        gather_share: float = 0.25,
        max_gather_s: float = 0.05,
        prompt_cache_bytes: int = PROMPT_CACHE_BYTES,
        attend: Attend | None = None,
        attend_rows: AttendRows | None = None,
        decoder: Decoder | None = None,
    ) -> None:
        self._module = module
        self._decoder = decoder
        self._steps_kwargs: dict[str, Any] = {} if attend is None else {_ATTEND_KWARG: attend}
        self._rows_kwargs = {} if attend_rows is None else {_ATTEND_ROWS_KWARG: attend_rows}
        self._device = device
        self._lock = lock
        self.batches_rows = enable_rows(module)
        self._max_rows = max_rows if self.batches_rows else 1
        self._gather_share = gather_share
        self._max_gather_s = max_gather_s
        self._condition = threading.Condition()
        self._waiting: list[_Row] = []
        self._busy = False
        self._last_rows = 1
        self._last_forward_s = 0.0
        self.counts = BatchCounts()
        self._prompt_cache_bytes = prompt_cache_bytes
        self._prompts: OrderedDict[tuple[int, ...], _KeptPrompt] = OrderedDict()
        self._prompts_bytes = 0

    @property
    def waiting(self) -> int:
        """How many rows wait for a batch now (not counting those in the running one)."""
        with self._condition:
            return len(self._waiting)

    @property
    def vocab_size(self) -> int:
        """The token ids the module embeds (its input embeddings' rows)."""
        return int(self._module.get_input_embeddings().num_embeddings)

    def new_cache(self) -> DynamicCache:
        """An empty KV cache for one session on this module (growing in place when it can)."""
        cache = DynamicCache(config=self._module.config)
        if all(type(layer) is DynamicLayer for layer in cache.layers):
            cache.layers = [GrowingLayer() for _ in cache.layers]
        return cache

    def prefill(self, cache: DynamicCache, token_ids: Sequence[int]) -> torch.Tensor:
        """Feed ``token_ids`` (a prompt, or a prefix rebuilt) into ``cache``, alone.

        An empty cache given tokens a prefill computed before gets a copy of the keys and
        values that prefill computed, and its logits: what the forward pass would compute
        again, without the prompt's cost (sessions opened on one example share their prompt).

        Returns:
            The next token's logits (1-D, float).
        """
        key = tuple(token_ids)
        with self._lock, torch.inference_mode():
            self.counts.prompts += 1
            kept = self._prompts.get(key) if cache.get_seq_length() == 0 else None
            if kept is not None:
                self._prompts.move_to_end(key)
                self.counts.prompts_reused += 1
                for index, (keys, values) in enumerate(kept.layers):
                    cache.update(keys, values, index)
                return kept.logits.clone()
            ids = torch.tensor([list(token_ids)], device=self._device)
            out = self._module(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
            logits: torch.Tensor = out.logits[0, -1].float()
            self._keep(key, cache, logits)
        return logits

    def feed(self, cache: DynamicCache, token_ids: Sequence[int]) -> torch.Tensor:
        """Feed ``token_ids`` into ``cache`` in one forward pass, alone, keeping the logits of
        every position: the passes of as many one-token steps, run at once (a trace replayed).

        Returns:
            ``[len(token_ids), vocab]`` float logits: row ``i`` is the next token's after
            ``token_ids[: i + 1]``.
        """
        with self._lock, torch.inference_mode():
            ids = torch.tensor([list(token_ids)], device=self._device)
            keep = len(token_ids)
            out = self._module(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=keep)
            logits: torch.Tensor = out.logits[0, -keep:].float()
        return logits

    def _keep(self, key: tuple[int, ...], cache: DynamicCache, logits: torch.Tensor) -> None:
        """Keep a copy of a prompt's cache just computed, within the bytes allowed."""
        if self._prompt_cache_bytes <= 0 or key in self._prompts:
            return
        layers = cache.layers
        if not all(type(layer) in (GrowingLayer, DynamicLayer) for layer in layers):
            return  # a sliding window keeps part of the prompt: a copy would not restore it
        if any(layer.get_seq_length() != len(key) for layer in layers):
            return
        kept = _KeptPrompt(
            tuple((layer.keys.clone(), layer.values.clone()) for layer in layers),
            logits.clone(),
        )
        if kept.nbytes > self._prompt_cache_bytes:
            return
        self._prompts[key] = kept
        self._prompts_bytes += kept.nbytes
        while self._prompts_bytes > self._prompt_cache_bytes:
            _, dropped = self._prompts.popitem(last=False)
            self._prompts_bytes -= dropped.nbytes

    @property
    def prompt_cache_bytes(self) -> int:
        """The bytes the prompts kept hold now."""
        return self._prompts_bytes

    def step(self, cache: DynamicCache, token_id: int) -> torch.Tensor:
        """Feed one token into ``cache``, in one forward pass with the other sessions waiting.

        Returns:
            The next token's logits (1-D, float).

        Raises:
            Whatever the forward pass raised (every row of a failed batch raises it).
        """
        row = _Row(cache, token_id)
        with self._condition:
            self._waiting.append(row)
            self._condition.notify_all()  # a gathering leader counts the rows that arrive
            while not row.done:
                if not self._busy:
                    self._busy = True
                    batch = self._gather(row)
                    break
                self._condition.wait()
            else:
                return row.result()
        try:
            self._run(batch)
        finally:
            with self._condition:
                self._busy = False
                self._condition.notify_all()  # the rows are done; a waiting row may lead next
        return row.result()

    def _gather(self, leader: _Row) -> list[_Row]:
        """The rows of the next batch, the leader's first (called holding the condition)."""
        wait = min(self._max_gather_s, self._gather_share * self._last_forward_s)
        deadline = time.monotonic() + wait
        wanted = min(self._last_rows, self._max_rows)
        while len(self._waiting) < wanted and (left := deadline - time.monotonic()) > 0:
            self._condition.wait(left)
        others = [r for r in self._waiting if r is not leader][: self._max_rows - 1]
        batch = [leader, *others]
        taken = set(map(id, batch))
        self._waiting = [r for r in self._waiting if id(r) not in taken]
        return batch

    def _run(self, batch: list[_Row]) -> None:
        """Run the batch and hand each row its logits, or the error (raised in each row's own
        thread, by :meth:`_Row.result`)."""
        start = time.perf_counter()
        try:
            with self._lock, torch.inference_mode():
                logits = self._forward(batch)
        except BaseException as exc:
            for row in batch:
                row.error = exc
        else:
            for row, row_logits in zip(batch, logits, strict=True):
                row.logits = row_logits
        finally:
            with self._condition:
                self._last_rows = len(batch)
                self._last_forward_s = time.perf_counter() - start
                self.counts.batches += 1
                self.counts.rows += len(batch)
                self.counts.largest = max(self.counts.largest, len(batch))
                for row in batch:
                    row.done = True

    def _forward(self, batch: list[_Row]) -> list[torch.Tensor]:
        decoded = self._decode(batch) if self._decoder is not None else None
        if decoded is not None:
            return list(decoded.unbind(0))
        ids = torch.tensor([[row.token_id] for row in batch], device=self._device)
        if len(batch) == 1:  # alone: the model's ordinary path
            out = self._module(
                input_ids=ids,
                cache=batch[0].cache,
                use_cache=True,
                logits_to_keep=1,
                **self._steps_kwargs,
            )
        else:
            positions = [[row.cache.get_seq_length()] for row in batch]
            out = self._module(
                input_ids=ids,
                position_ids=torch.tensor(positions, device=self._device),
                use_cache=False,
                logits_to_keep=1,
                **{_ROWS_KWARG: [row.cache for row in batch]},
                **self._steps_kwargs,
                **self._rows_kwargs,
            )
        logits: torch.Tensor = out.logits[:, -1].float()
        return list(logits.unbind(0))

    def _decode(self, batch: list[_Row]) -> torch.Tensor | None:
        """The batch's logits from the decoder, or None where a row's cache does not grow in
        place (nothing is written then)."""
        decoder = self._decoder
        assert decoder is not None
        for row in batch:
            layers = row.cache.layers
            if row.cache.offloading or len(layers) != decoder.layers:
                return None
            for layer in layers:
                if type(layer) is not GrowingLayer or not layer.is_initialized:
                    return None
        template = decoder.template
        slots = [[layer.slot(template, template) for layer in row.cache.layers] for row in batch]
        logits = decoder.decode([row.token_id for row in batch], slots)
        if logits is not None:
            for row in batch:
                for layer in row.cache.layers:
                    layer.advance()
        return logits
