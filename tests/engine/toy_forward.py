"""A toy forward engine for the stepper's own tests: no torch model, a vocabulary of a few dozen
tokens, logits computed deterministically from the prefix.

It tests the stepper's rules (step, back, force, rollback, stop reasons, top-K and blocked-mass
bookkeeping) in milliseconds. It says nothing about a real model: the tests that claim to test
the model run the real one (``tests/engine/stepper/test_session.py``).

The masks are real: the grammars compile with xgrammar for the toy vocabulary, in-process,
through the same request function the compile workers run.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import xgrammar as xgr

from app.engine.grammars.compile_worker import compile_request
from app.engine.grammars.spec import CompileResult, GrammarKind, GrammarSpec
from app.engine.masking import MaskingEngine, new_masking
from app.engine.model.forward.base import ForwardEngine, ModelIdentity, RawDistribution
from app.engine.model.prompt import Prompt, render_prompt
from app.engine.model.sampling import SamplingParams, choose_token
from app.engine.stepper.session import Session
from app.engine.tokens import Tokens
from app.exceptions import MaskscopeError
from tests.engine.faults import BrokenRollback, Fault, FaultyForward, FaultyMasking

__all__ = [
    "EOS",
    "END",
    "VOCAB",
    "ToyForward",
    "ToyModel",
    "toy_grammar",
    "toy_session",
    "toy_tokens",
]

#: The toy vocabulary. ``<eos>`` is xgrammar's stop token; ``<end>`` is a second stop id of the
#: model that the grammar sees as plain text (how a session stops with ``eos``).
VOCAB: tuple[str, ...] = (
    "<eos>", "<end>", "{", "}", '"', ":", ",", " ", "[", "]",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    "a", "b", "c", "ab", "ba", "abc", '{"', '":', '",', "true", "false", "null",
    "-", ".", "x", "hello",
)  # fmt: skip
EOS = VOCAB.index("<eos>")
END = VOCAB.index("<end>")


class _ToyTokenizer:
    """Just enough of a tokenizer for :class:`Tokens`: greedy longest-match encoding, no chat
    template."""

    chat_template = None
    all_special_ids = (EOS, END)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        while text:
            match = max(
                (i for i, t in enumerate(VOCAB) if i not in (EOS, END) and text.startswith(t)),
                key=lambda i: len(VOCAB[i]),
            )
            ids.append(match)
            text = text[len(VOCAB[match]) :]
        return ids


def toy_tokens() -> Tokens:
    """The toy vocabulary with xgrammar's view of it."""
    info = xgr.TokenizerInfo(list(VOCAB), xgr.VocabType.RAW, stop_token_ids=[EOS])
    return Tokens(
        tokenizer=_ToyTokenizer(),
        info=info,
        vocab_size=len(VOCAB),
        token_bytes=tuple(t.encode() for t in VOCAB),
        stop_ids=frozenset({EOS, END}),
        special_ids=frozenset({EOS, END}),
    )


def _logits(prefix: Sequence[int], vocab_size: int) -> torch.Tensor:
    """Logits that depend only on the prefix: a normal draw seeded by its ids."""
    generator = torch.Generator().manual_seed(zlib.crc32(repr(tuple(prefix)).encode()))
    return torch.randn(vocab_size, generator=generator) * 2.0


class ToyForward:
    """A prefix and deterministic logits for it: what the stepper asks of a forward engine.

    Args:
        prompt_ids: the prompt's token ids.
        vocab_size: the logits' width.
        favour: generated-token count -> a token whose logit is raised by 20 at that step (the
            most probable one, so a greedy step picks it wherever the grammar allows it).
    """

    def __init__(
        self, prompt_ids: Sequence[int], vocab_size: int, favour: Mapping[int, int] | None = None
    ) -> None:
        self._prompt = tuple(prompt_ids)
        self._generated: list[int] = []
        self._vocab_size = vocab_size
        self._favour = dict(favour or {})
        self.forward_passes = 0

    def distribution(self) -> RawDistribution:
        """See :meth:`ForwardEngine.distribution`."""
        start = time.perf_counter()
        self.forward_passes += 1
        prefix = self._prompt + tuple(self._generated)
        logits = _logits(prefix, self._vocab_size)
        favoured = self._favour.get(len(self._generated))
        if favoured is not None:
            logits[favoured] += 20.0
        return RawDistribution(forward_ms=(time.perf_counter() - start) * 1000, logits=logits)

    def choose(
        self, raw: RawDistribution, bitmask: torch.Tensor, sampling: SamplingParams, *, index: int
    ) -> int:
        """See :meth:`ForwardEngine.choose`: the same masking and sampler as the local model."""
        assert raw.logits is not None
        masked = raw.logits.unsqueeze(0).clone()
        xgr.apply_token_bitmask_inplace(masked, bitmask)
        return choose_token(masked[0], sampling, index)

    def with_token(self, raw: RawDistribution, token_id: int) -> RawDistribution:
        """See :meth:`ForwardEngine.with_token`: the logits hold every token."""
        return raw

    def extend(self, token_id: int) -> None:
        """See :meth:`ForwardEngine.extend`."""
        self._generated.append(token_id)

    def truncate(self, generated: int) -> None:
        """See :meth:`ForwardEngine.truncate`."""
        del self._generated[generated:]

    @property
    def memory_bytes(self) -> int:
        """See :meth:`ForwardEngine.memory_bytes`: a pretend cache of 8 bytes a token."""
        return 8 * (len(self._prompt) + len(self._generated))


class ToyModel:
    """The toy vocabulary as a model sessions run on (a :class:`ServingModel`).

    Args:
        favour: passed to every :class:`ToyForward` it opens.
    """

    def __init__(self, favour: Mapping[int, int] | None = None) -> None:
        self.tokens = toy_tokens()
        self.identity = ModelIdentity(
            model_id="toy", weights_sha256=None, xgrammar="toy", transformers="",
            torch=torch.__version__,
        )  # fmt: skip
        self.favour = dict(favour or {})
        self.closed = 0

    def open_forward(self, prompt_ids: Sequence[int]) -> ToyForward:
        """A toy forward engine for a prompt."""
        return ToyForward(prompt_ids, self.tokens.vocab_size, self.favour)

    def close(self) -> None:
        """Count the closes (the engine's close test reads them)."""
        self.closed += 1


def toy_grammar(kind: GrammarKind, source: str, tokens: Tokens | None = None) -> CompileResult:
    """``source`` compiled by xgrammar for the toy vocabulary, in this process.

    Raises:
        GrammarError: xgrammar refuses it.
    """
    tokens = tokens or toy_tokens()
    spec = GrammarSpec(kind, source)
    compiler = xgr.GrammarCompiler(tokens.info, cache_enabled=False)
    request: dict[str, Any] = {
        "kind": kind.value,
        "source": source,
        "options": spec.options.to_dict(),
    }
    answer = compile_request(compiler, request)
    if not answer["ok"]:
        raise MaskscopeError.from_dict(answer["error"])
    return CompileResult(
        spec=spec,
        compiled=xgr.CompiledGrammar.deserialize_json(answer["serialized"], tokens.info),
        grammar_text=answer["grammar_text"],
        rule_names=tuple(answer["rule_names"]),
        warnings=tuple(answer["warnings"]),
        compile_ms=float(answer["compile_ms"]),
        size_bytes=int(answer["size_bytes"]),
    )


def toy_session(
    grammar: CompileResult,
    *,
    prompt: str = "a",
    model: ToyModel | None = None,
    sampling: SamplingParams | None = None,
    max_tokens: int = 32,
    top_k: int = 5,
    fault: Fault | None = None,
    after_fill: Callable[[torch.Tensor, int], None] | None = None,
    broken_rollback: bool = False,
    draft_tokens: int = 0,
    overlap: bool = True,
) -> tuple[Session, ToyForward]:
    """A session on the toy model under ``grammar`` (greedy unless told), and its forward
    engine; with ``fault`` or ``after_fill``, its engines are wrapped in
    :class:`~tests.engine.faults.FaultyForward` and :class:`~tests.engine.faults.FaultyMasking`;
    with ``broken_rollback``, its masking engine in :class:`~tests.engine.faults.BrokenRollback`.
    """
    model = model or ToyModel()
    rendered: Prompt = render_prompt(model.tokens, raw=prompt)
    forward = model.open_forward(rendered.token_ids)
    masking: MaskingEngine = new_masking(grammar)
    engine: ForwardEngine = forward
    if fault is not None or after_fill is not None:
        fault = fault or Fault("", when=lambda: False)
        masking = FaultyMasking(masking, fault, after_fill=after_fill)
        engine = FaultyForward(forward, fault)
    if broken_rollback:
        masking = BrokenRollback(masking)
    session = Session(
        model,
        grammar,
        rendered,
        masking=masking,
        forward=engine,
        sampling=sampling,
        max_tokens=max_tokens,
        top_k=top_k,
        draft_tokens=draft_tokens,
        overlap=overlap,
    )
    return session, forward
