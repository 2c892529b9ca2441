"""The engine's front door: one model, one grammar compiler, and what they make together."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Generic, TypeAlias

from typing_extensions import TypeVar

from app.engine.grammars.compiler import GrammarCompiler
from app.engine.grammars.llguidance import LlguidanceCompiler
from app.engine.grammars.reasoning import ReasoningGate, ReasoningMode
from app.engine.grammars.spec import CompileResult, GrammarKind, GrammarSpec, MaskingLibrary
from app.engine.grammars.tools.compile import ToolsCompiler
from app.engine.masking import new_masking
from app.engine.masking.compare import Follower
from app.engine.model.forward.base import ServingModel
from app.engine.model.loading import LoadedModel, load_model
from app.engine.model.prompt import ChatMessage, render_prompt
from app.engine.model.sampling import SamplingParams
from app.engine.records import ReplayResult
from app.engine.stepper.breakpoints import Breakpoint
from app.engine.stepper.replay import replay, verdict
from app.engine.stepper.session import Session
from app.engine.stepper.stops import EndRules, end_walk
from app.exceptions import InvalidInput
from app.settings import Settings

__all__ = ["AnyEngine", "Engine"]

#: The model an engine runs: the local one unless said otherwise (``Engine[RemoteModel]``).
M = TypeVar("M", bound=ServingModel, default=LoadedModel, covariant=True)


class Engine(Generic[M]):
    """A model (the local one, or a remote engine's) with its grammar compilers (xgrammar's
    workers, llguidance in-process).

    The engine owns its model and, unless told otherwise, its compiler: :meth:`close` closes
    them.

    Args:
        model: the model and its tokenizer.
        compiler: a compiler built for the model's tokenizer.
        settings: limits and defaults.
        owns_compiler: False when ``compiler`` is shared with another engine (a remote engine
            on the local model's tokenizer), which closes it.
    """

    def __init__(
        self, model: M, compiler: GrammarCompiler, settings: Settings, *, owns_compiler: bool = True
    ) -> None:
        self.model = model
        self.compiler = compiler
        self.llguidance = LlguidanceCompiler(model.tokens)
        # A tools builder is told the model's tokenizer as the directory or hub id it loads from.
        self.tools = ToolsCompiler(str(getattr(model.tokens.tokenizer, "name_or_path", "")))
        self.settings = settings
        self.owns_compiler = owns_compiler
        self._closed = False

    @staticmethod
    def load(settings: Settings) -> Engine[LoadedModel]:
        """Load the configured model and start the compile workers."""
        model = load_model(settings)
        return Engine(model, GrammarCompiler.from_settings(model.tokens.info, settings), settings)

    def compile(self, spec: GrammarSpec) -> CompileResult:
        """Compile (or fetch from the cache) a grammar for this model's tokenizer, with the
        library ``spec`` names (a ``tools`` spec: the tag its builder makes)."""
        if spec.kind is GrammarKind.TOOLS:
            return self.tools.compile(spec, self.compile)
        if spec.library is MaskingLibrary.LLGUIDANCE:
            return self.llguidance.compile(spec)
        return self.compiler.compile(spec)

    def cached(self, spec: GrammarSpec) -> CompileResult | None:
        """The cached compile of ``spec``, or None: answers at once, never waits for a worker."""
        if spec.kind is GrammarKind.TOOLS:
            return self.tools.cached(spec, self.cached)
        if spec.library is MaskingLibrary.LLGUIDANCE:
            return self.llguidance.cached(spec)
        return self.compiler.cached(spec)

    def follower(self, grammar: CompileResult, compare: MaskingLibrary | None) -> Follower | None:
        """Compare mode: ``compare``'s masking engine for the same request, or None.

        Raises:
            InvalidInput: ``compare`` is the library that already masks.
            GrammarError: the grammar does not compile with ``compare``.
        """
        if compare is None:
            return None
        return Follower(new_masking(self._compare(grammar, compare)), self.model.tokens)

    def new_session(
        self,
        grammar: GrammarSpec | CompileResult,
        *,
        messages: Sequence[ChatMessage] = (),
        raw_prompt: str | None = None,
        sampling: SamplingParams | None = None,
        max_tokens: int = 256,
        top_k: int | None = None,
        compare: MaskingLibrary | None = None,
        draft_tokens: int = 0,
        reasoning: ReasoningMode | ReasoningGate = ReasoningMode.NONE,
        breakpoints: Sequence[Breakpoint] = (),
        end_rules: EndRules | None = None,
    ) -> Session:
        """Compile ``grammar`` (unless already compiled), render the prompt and open a session;
        with ``compare``, that library follows the same tokens (see :meth:`follower`); with
        ``draft_tokens``, each step validates that many speculative drafts first; ``breakpoints``
        stop a run (see :mod:`app.engine.stepper.breakpoints`); ``end_rules`` apply
        ``min_tokens``, stop ids and stop strings as vLLM does (:mod:`app.engine.stepper.stops`).

        Raises:
            GrammarError: the grammar does not compile.
            InvalidInput: a value outside its range (max_tokens above the cap...).
            NoForwardEngine: the model is a tokenizer only.
        """
        if max_tokens > self.settings.max_tokens_cap:
            raise InvalidInput(
                f"max_tokens must be at most {self.settings.max_tokens_cap}, got {max_tokens}"
            )
        refuse = getattr(self.model, "refuse_session", None)  # a model with no forward pass
        if refuse is not None:
            refuse()
        compiled = self.compile(grammar) if isinstance(grammar, GrammarSpec) else grammar
        prompt = render_prompt(self.model.tokens, messages, raw_prompt)
        return Session(
            self.model,
            compiled,
            prompt,
            masking=new_masking(compiled),
            forward=self.model.open_forward(prompt.token_ids),
            sampling=sampling,
            max_tokens=max_tokens,
            top_k=top_k or self.settings.top_k,
            follower=self.follower(compiled, compare),
            draft_tokens=draft_tokens,
            reasoning=reasoning,
            breakpoints=breakpoints,
            end_rules=end_rules,
        )

    def replay(
        self,
        grammar: GrammarSpec | CompileResult,
        *,
        text: str | None = None,
        token_ids: Sequence[int] | None = None,
        bitmask_for: Collection[int] = (),
        compare: MaskingLibrary | None = None,
        reasoning: ReasoningMode = ReasoningMode.NONE,
        end_rules: EndRules | None = None,
    ) -> ReplayResult:
        """Walk ``text`` or ``token_ids`` through the grammar (compiled unless it is); no model.

        At most ``settings.replay_token_cap`` tokens; bitmasks only for ``bitmask_for``. With
        ``compare``, that library walks the same tokens too and its verdict is the result's
        ``follower``. ``reasoning`` gates the mask as a session's does. With ``end_rules``
        (``min_tokens``, stop ids, stop strings) the result's ``end`` reports the end of
        generation as vLLM decides it.

        Raises:
            ReplayTooLong: more tokens than the cap.
        """
        compiled = self.compile(grammar) if isinstance(grammar, GrammarSpec) else grammar
        tokens = self.model.tokens
        end = None if end_rules is None else end_walk(compiled, tokens, end_rules, model=self.model)
        result = replay(
            compiled,
            tokens,
            text=text,
            token_ids=token_ids,
            bitmask_for=bitmask_for,
            max_tokens=self.settings.replay_token_cap,
            reasoning=reasoning,
            end=end,
        )
        if end is not None:
            result = dataclasses.replace(result, end=end.report().to_dict())
        if compare is None:
            return result
        other = self._compare(compiled, compare)
        verdict = replay(
            other, self.model.tokens, text=text, token_ids=token_ids, reasoning=reasoning
        )
        return dataclasses.replace(result, follower=verdict.verdict(compare.value))

    def _compare(self, grammar: CompileResult, compare: MaskingLibrary) -> CompileResult:
        """The same request compiled by ``compare`` (which must be the other library)."""
        if compare is grammar.spec.library:
            raise InvalidInput(
                f"compare names {compare.value}, which already masks: name the other engine",
                pointer="/compare",
            )
        return self.compile(dataclasses.replace(grammar.spec, library=compare))

    def verdict(self, grammar: CompileResult, text: str) -> ReplayResult:
        """What :meth:`replay` says of ``text`` (accepted, complete, rejection), without the
        per-token states (``tokens`` is empty): a mask only where the grammar refuses.

        Raises:
            ReplayTooLong: more tokens than ``settings.replay_token_cap``.
        """
        return verdict(
            grammar, self.model.tokens, text=text, max_tokens=self.settings.replay_token_cap
        )

    def close(self) -> None:
        """Close what this engine owns: its compile workers (unless the compiler is shared) and
        its model (a remote engine's connections). A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        if self.owns_compiler:
            self.compiler.close()
        self.model.close()


#: An engine on any model: what routes that only need a tokenizer and a compiler take.
AnyEngine: TypeAlias = Engine[ServingModel]
