"""The engine's front door: one model, one grammar compiler, and what they make together."""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.compiler import GrammarCompiler
from app.engine.forward import LocalForward
from app.engine.grammar import CompileResult, GrammarSpec
from app.engine.masking import new_masking
from app.engine.model import LoadedModel, load_model
from app.engine.prompt import ChatMessage, render_prompt
from app.engine.records import ReplayResult
from app.engine.replay import replay
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.exceptions import InvalidInput
from app.settings import Settings

__all__ = ["Engine"]


class Engine:
    """A loaded model with its grammar compiler.

    Args:
        model: the loaded model and tokenizer.
        compiler: a compiler built for the model's tokenizer.
        settings: limits and defaults.
    """

    def __init__(self, model: LoadedModel, compiler: GrammarCompiler, settings: Settings) -> None:
        self.model = model
        self.compiler = compiler
        self.settings = settings

    @classmethod
    def load(cls, settings: Settings) -> Engine:
        """Load the configured model and start the compile workers."""
        model = load_model(settings)
        compiler = GrammarCompiler(
            model.tokens.info,
            workers=settings.compile_workers,
            timeout_s=settings.compile_timeout_s,
            cache_bytes=settings.compile_cache_bytes,
        )
        return cls(model, compiler, settings)

    def compile(self, spec: GrammarSpec) -> CompileResult:
        """Compile (or fetch from the cache) a grammar for this model's tokenizer."""
        return self.compiler.compile(spec)

    def new_session(
        self,
        spec: GrammarSpec,
        *,
        messages: Sequence[ChatMessage] = (),
        raw_prompt: str | None = None,
        sampling: SamplingParams | None = None,
        max_tokens: int = 256,
        top_k: int | None = None,
    ) -> Session:
        """Compile ``spec``, render the prompt and open a session ready to step.

        Raises:
            GrammarError: the grammar does not compile.
            InvalidInput: a value outside its range (max_tokens above the cap...).
        """
        if max_tokens > self.settings.max_tokens_cap:
            raise InvalidInput(
                f"max_tokens must be at most {self.settings.max_tokens_cap}, got {max_tokens}"
            )
        grammar = self.compile(spec)
        prompt = render_prompt(self.model.tokens, messages, raw_prompt)
        return Session(
            self.model,
            grammar,
            prompt,
            masking=new_masking(grammar),
            forward=LocalForward(self.model, prompt.token_ids),
            sampling=sampling,
            max_tokens=max_tokens,
            top_k=top_k or self.settings.top_k,
        )

    def replay(
        self,
        spec: GrammarSpec,
        *,
        text: str | None = None,
        token_ids: Sequence[int] | None = None,
    ) -> ReplayResult:
        """Walk ``text`` or ``token_ids`` through the compiled grammar; no model runs."""
        return replay(self.compile(spec), self.model.tokens, text=text, token_ids=token_ids)

    def close(self) -> None:
        """Stop the compile workers."""
        self.compiler.close()
