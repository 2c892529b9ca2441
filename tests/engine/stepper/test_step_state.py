"""One parser state per record: depth, path and rules are those the step's mask was computed in."""

from __future__ import annotations

from app.engine import Engine, GrammarState
from tests.engine.conftest import NESTED, nested_session


def test_step_0_of_a_json_schema_is_at_depth_0_and_path_root(engine: Engine) -> None:
    session = nested_session(engine)
    assert session.state == GrammarState(depth=0, path="$", rules=session.state.rules)
    first = session.step()
    assert first.token_text == "{"
    assert (first.depth, first.path) == (0, "$")
    assert first.rules and first.rules[0] == "root"
    assert session.state.depth == 1


def test_each_record_holds_the_state_the_previous_step_left(engine: Engine) -> None:
    session = nested_session(engine)
    states = []
    for _ in range(40):
        states.append(session.state)
        session.step()
    for record, state in zip(session.steps, states, strict=True):
        assert GrammarState(record.depth, record.path, record.rules) == state
    assert len({s.rules for s in states}) > 3, "the rules move as the parser does"
    assert "$.user.profile" in {s.path for s in states}


def test_going_back_restores_the_state_of_that_step(engine: Engine) -> None:
    session = nested_session(engine)
    session.run(25)
    record = session.steps[15]
    session.back(10)
    assert session.state == GrammarState(record.depth, record.path, record.rules)


def test_replay_reports_the_same_states_as_the_session(engine: Engine) -> None:
    session = nested_session(engine)
    session.run(NESTED.max_tokens)
    ids = [r.token_id for r in session.steps]
    replayed = engine.replay(session.grammar.spec, token_ids=ids, bitmask_for=range(len(ids)))
    assert replayed.accepted and replayed.complete
    assert replayed.tokens[0].depth == 0 and replayed.tokens[0].path == "$"
    for token, record in zip(replayed.tokens, session.steps, strict=True):
        assert (token.depth, token.path, token.rules) == (record.depth, record.path, record.rules)
        assert token.bitmask == record.bitmask and token.allowed_count == record.allowed_count
