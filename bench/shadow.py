"""How much a shadow continuation slows the constrained run beside it, on the default model.

Runs the pricing example greedily alone, then again while a shadow continuation (no mask, from
the prompt) runs on another thread, as the web layer runs one (its own thread, the model's
forward passes shared), interleaved ``--rounds`` times, and prints the constrained run's
wall time per step p50 of each, their ratio, and the shadow's own time per token.

Usage: ``.venv/bin/python bench/shadow.py [--rounds 2] [--tokens 48]``
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, with_schema
from app.engine.stepper.session import Session
from app.engine.stepper.shadow import shadow
from app.examples import load_examples
from app.settings import Settings


def _session(engine: Engine, max_tokens: int) -> Session:
    example = next(e for e in load_examples() if e.id == "pricing")
    return engine.new_session(
        GrammarSpec(GrammarKind.JSON_SCHEMA, example.source()),
        messages=[
            ChatMessage("system", with_schema(example.system, example.source())),
            ChatMessage("user", example.prompt),
        ],
        max_tokens=max_tokens,
    )


def _per_step_ms(session: Session, tokens: int) -> list[float]:
    times: list[float] = []
    session.step()  # the prefill
    while len(times) < tokens - 1 and not session.done:
        start = time.perf_counter()
        session.step()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    """Run both, interleaved, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    engine = Engine.load(Settings())
    alone: list[float] = []
    beside: list[float] = []
    shadow_ms: list[float] = []
    try:
        _session(engine, 4).run(4)  # warm up
        for _ in range(args.rounds):
            alone.extend(_per_step_ms(_session(engine, args.tokens), args.tokens))
            session = _session(engine, args.tokens)
            cancel = threading.Event()

            def run_shadow(session: Session = session, cancel: threading.Event = cancel) -> None:
                start = time.perf_counter()
                result = shadow(session.model, session.prompt, [], tokens=args.tokens,
                                cancel=cancel)  # fmt: skip
                shadow_ms.append((time.perf_counter() - start) * 1000 / max(len(result.tokens), 1))

            thread = threading.Thread(target=run_shadow)
            thread.start()
            beside.extend(_per_step_ms(session, args.tokens))
            cancel.set()
            thread.join()
    finally:
        engine.close()
    a, b = statistics.median(alone), statistics.median(beside)
    print(f"constrained step, p50: alone {a:.1f} ms, with a shadow beside {b:.1f} ms, "
          f"ratio {b / a:.3f} ({len(alone)} steps each)")  # fmt: skip
    print(f"the shadow, per token: {statistics.median(shadow_ms):.1f} ms")


if __name__ == "__main__":
    main()
