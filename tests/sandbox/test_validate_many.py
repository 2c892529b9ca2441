"""Many texts validated by the Pydantic model in one sandbox process."""

from __future__ import annotations

from app.examples import EXAMPLES_DIR
from app.sandbox.sandbox import Sandbox

GOOD = '{"user": {"id": 7, "profile": {"display_name": "A", "settings": {"theme": "dark", ' \
       '"notifications": true}}}}'  # fmt: skip


def test_each_text_gets_the_models_own_verdict() -> None:
    source = (EXAMPLES_DIR / "nested.py").read_text()
    verdicts = Sandbox().validate_many(source, None, [GOOD, GOOD.replace("7", "0"), "{", "{}"])
    assert [v.valid for v in verdicts] == [True, False, False, False]
    assert verdicts[1].errors[0].path == "$.user.id"
    assert "greater than or equal to 1" in verdicts[1].errors[0].message
    assert verdicts[3].errors[0].path == "$.user"
