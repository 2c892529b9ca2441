"""``POST /api/suites``, its progress and its report: a zip and a JSONL of the fixture suite
checked as :class:`app.suite.checker.Checker` checks them, kept and reopened; the caps (size,
files, unpacked bytes, sources), zip slip and unknown ids, on the toy engine."""

from __future__ import annotations

import io
import json
import shutil
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.suite.checker import Checker
from app.suite.discovery import discover
from app.web.services.suite_upload import options_for
from tests.conftest import as_page
from tests.web.sse import parse_events

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "suite"
#: A small part of the fixture suite: tests beside two sources, an ignored keyword, a file that
#: does not parse, an EBNF grammar.
FILES = ["schemas/person.json", "schemas/person.tests.jsonl", "schemas/tags.json",
         "schemas/broken.json", "grammars/yesno.ebnf", "grammars/yesno.tests.jsonl"]  # fmt: skip
CAPS: dict[str, Any] = {"max_body_bytes": 300_000, "suite_max_upload_bytes": 20_000,
                        "suite_max_unpacked_bytes": 50_000, "suite_max_sources": 8,
                        "suite_max_files": 12}  # fmt: skip


def zipped(entries: dict[str, bytes]) -> bytes:
    """A zip of ``entries`` (name -> bytes), deflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


def fixture_zip() -> bytes:
    return zipped({name: (SUITE / name).read_bytes() for name in FILES})


def _client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings, engine=engine)) as client:
        yield as_page(client)


@pytest.fixture(scope="module")
def suites_client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An app on the real model, its own store, small caps."""
    db = tmp_path_factory.mktemp("suites") / "maskscope.db"
    yield from _client(Settings(db_path=db, **CAPS), engine)


@pytest.fixture(scope="module")
def toy_suites(toy: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The same on the toy engine: for the refusals, which check nothing."""
    db = tmp_path_factory.mktemp("toy-suites") / "maskscope.db"
    yield from _client(Settings(db_path=db, **CAPS), toy)


def _checked(client: TestClient, response: Any) -> dict[str, Any]:
    """The suite a POST started, followed to its end: its events and its report."""
    assert response.status_code == 202, response.text
    created = response.json()
    assert created["url"] == f"/suites/{created['id']}"
    stream = client.get(f"/api/suites/{created['id']}/events")
    assert stream.status_code == 200, stream.text
    events = parse_events(stream.text)
    report = client.get(f"/api/suites/{created['id']}").json()
    return {"id": created["id"], "events": events, "report": report}


def _reference(engine: Engine, folder: Path, paths: list[str],
               monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:  # fmt: skip
    """What :class:`Checker` gives for the same sources, named from the same folder."""
    monkeypatch.chdir(folder)
    sources = discover(paths)
    checker = Checker(Settings(), options_for("maskscope"), lambda: engine)
    return [_comparable(c.to_dict()) for c in checker.check(sources, ["maskscope"], ["xgrammar"])]


def _comparable(case: dict[str, Any]) -> dict[str, Any]:
    """A case without what differs from run to run (its compile's time)."""
    return {k: v for k, v in case.items() if k not in ("compile_ms", "cached")}


@pytest.mark.model
def test_a_zipped_suite_is_checked_as_the_checker_checks_it(
    suites_client: TestClient, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = suites_client.post("/api/suites", files={"file": ("suite.zip", fixture_zip())})
    done = _checked(suites_client, response)
    progress = [json.loads(e["data"]) for e in done["events"] if e["event"] == "progress"]
    assert [p["done"] for p in progress] == [1, 2, 3, 4]  # four sources, tests beside two
    assert {p["total"] for p in progress} == {4} and all("<tr" in p["row"] for p in progress)
    end = json.loads(done["events"][-1]["data"])
    assert done["events"][-1]["event"] == "end" and end["kept"] and not end["cut_short"]
    report = done["report"]
    assert report["status"] == "done" and report["done"] == report["total"] == 4
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SUITE / name, tmp_path / name)
    expected = _reference(engine, tmp_path, ["schemas", "grammars"], monkeypatch)
    assert [_comparable(c) for c in report["cases"]] == expected
    assert end["summary"] == report["summary"]
    tags = next(c for c in report["cases"] if c["source"] == "schemas/tags.json")
    assert [f["level"] for f in tags["findings"]] == ["ignored"]
    # The same suite again: the same id, nothing checked again; the page reopens it.
    again = suites_client.post("/api/suites", files={"file": ("suite.zip", fixture_zip())})
    assert again.status_code == 200 and again.json()["id"] == done["id"]
    page = suites_client.get(f"/suites/{done['id']}")
    assert page.status_code == 200 and 'data-name="schemas/tags.json"' in page.text
    assert page.text.count('class="suite-row') == 4


@pytest.mark.model
def test_a_jsonl_suite_is_checked_as_the_checker_checks_it(
    suites_client: TestClient, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (SUITE / "lines" / "inline.jsonl").read_bytes()
    response = suites_client.post(
        "/api/suites?engine=xgrammar", content=data,
        headers={"Content-Type": "application/x-ndjson"},
    )  # fmt: skip
    report = _checked(suites_client, response)["report"]
    assert [c["source"] for c in report["cases"]] == [
        "suite.jsonl#colour.json", "suite.jsonl#digits.regex", "suite.jsonl#flag.json"]  # fmt: skip
    shutil.copy(SUITE / "lines" / "inline.jsonl", tmp_path / "suite.jsonl")
    assert [_comparable(c) for c in report["cases"]] == _reference(
        engine, tmp_path, ["suite.jsonl"], monkeypatch)  # fmt: skip


@pytest.mark.model
def test_a_row_opens_the_playground_on_its_source(suites_client: TestClient) -> None:
    response = suites_client.post("/api/suites", files={"file": ("suite.zip", fixture_zip())})
    suite_id = response.json()["id"]
    suites_client.get(f"/api/suites/{suite_id}/events")  # to its end
    opened = suites_client.get(f"/suites/{suite_id}/open?source=schemas/tags.json",
                               follow_redirects=False)  # fmt: skip
    assert opened.status_code == 303 and opened.headers["location"].startswith("/s/")
    snapshot = suites_client.get(f"/api/permalinks/{opened.headers['location'][3:]}").json()
    grammar = snapshot["request"]["grammar"]
    assert grammar["kind"] == "json_schema"
    assert grammar["source"] == (SUITE / "schemas" / "tags.json").read_text()
    person = suites_client.get(f"/suites/{suite_id}/open?source=schemas/person.json",
                               follow_redirects=False)  # fmt: skip
    tests = suites_client.get(f"/api/permalinks/{person.headers['location'][3:]}").json()["tests"]
    assert [t["expect"] for t in tests] == ["pass", "fail"]  # its tests come with it


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def _post_zip(client: TestClient, entries: dict[str, bytes]) -> Any:
    return client.post("/api/suites", files={"file": ("suite.zip", zipped(entries))})


def test_an_upload_over_its_cap_is_413(toy_suites: TestClient) -> None:
    big = {"schemas/a.json": json.dumps({"description": "x" * 40_000}).encode()}
    # Stored, not deflated: the upload itself is over the 20,000 bytes.
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("schemas/a.json", big["schemas/a.json"])
    raw = toy_suites.post("/api/suites", content=out.getvalue(),
                          headers={"Content-Type": "application/zip"})  # fmt: skip
    error = _error(raw, 413)
    assert error["code"] == "too_large" and "MASKSCOPE_SUITE_MAX_UPLOAD_BYTES" in error["message"]
    form = toy_suites.post("/api/suites", files={"file": ("suite.zip", out.getvalue())})
    assert "MASKSCOPE_SUITE_MAX_UPLOAD_BYTES" in _error(form, 413)["message"]


@pytest.mark.parametrize(
    ("entry", "says"),
    [("../evil.json", "climbs out of the suite"), ("schemas/../../evil.json", "climbs out"),
     ("/etc/evil.json", "is an absolute path"), ("C:/evil.json", "is an absolute path")],
)  # fmt: skip
def test_a_zip_slip_is_422_naming_the_entry(toy_suites: TestClient, entry: str, says: str) -> None:
    error = _error(_post_zip(toy_suites, {"ok.json": b"{}", entry: b"{}"}), 422)
    assert error["code"] == "invalid_input" and repr(entry) in error["message"]
    assert says in error["message"] and error["pointer"] == "/file"


def test_a_symbolic_link_in_a_zip_is_422(toy_suites: TestClient) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("ok.json", "{}")
        link = zipfile.ZipInfo("schemas/link.json")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    response = toy_suites.post("/api/suites", files={"file": ("suite.zip", out.getvalue())})
    error = _error(response, 422)
    assert "'schemas/link.json' is a symbolic link" in error["message"]


def test_a_zip_bomb_is_413_by_its_unpacked_size(toy_suites: TestClient) -> None:
    bomb = zipped({"schemas/zeros.json": b"0" * 2_000_000})
    assert len(bomb) < 20_000  # under the upload cap: only its unpacked size is over
    error = _error(toy_suites.post("/api/suites", files={"file": ("bomb.zip", bomb)}), 413)
    assert "2,000,000 bytes" in error["message"]
    assert "MASKSCOPE_SUITE_MAX_UNPACKED_BYTES" in error["message"]


def test_too_many_sources_or_files_is_413(toy_suites: TestClient) -> None:
    sources = {f"s{i}.json": b"{}" for i in range(9)}
    error = _error(_post_zip(toy_suites, sources), 413)
    assert "9 sources" in error["message"] and "MASKSCOPE_SUITE_MAX_SOURCES" in error["message"]
    files = {f"notes{i}.txt": b"" for i in range(13)}
    error = _error(_post_zip(toy_suites, files), 413)
    assert "13 files" in error["message"] and "MASKSCOPE_SUITE_MAX_FILES" in error["message"]


def test_bad_suites_are_422_with_what_is_wrong(toy_suites: TestClient) -> None:
    not_zip = toy_suites.post("/api/suites", files={"file": ("suite.zip", b"not a zip")})
    assert "not a zip archive" in _error(not_zip, 422)["message"]
    empty = _error(_post_zip(toy_suites, {"README.md": b"hi"}), 422)
    assert "holds no source" in empty["message"]
    line = toy_suites.post("/api/suites", content=b'{"name": "a.json", "source": {}}\nnope\n',
                           headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
    error = _error(line, 422)
    assert error["message"].startswith("suite.jsonl:2: not JSON") and error["line"] == 2
    engine = toy_suites.post("/api/suites?engine=outlines", files={"file": ("s.zip", b"")})
    assert _error(engine, 422)["pointer"] == "/engine/0"
    plain = toy_suites.post("/api/suites", json={"a": 1})
    assert "multipart/form-data" in _error(plain, 422)["message"]


def test_an_unknown_suite_is_404(toy_suites: TestClient) -> None:
    for path in ("/api/suites/AAAAAAAAAAAA", "/api/suites/AAAAAAAAAAAA/events",
                 "/api/suites/not-an-id!"):  # fmt: skip
        assert _error(toy_suites.get(path), 404)["code"] == "permalink_not_found"
    page = toy_suites.get("/suites/AAAAAAAAAAAA")
    assert page.status_code == 404 and "No suite has this id" in page.text


def test_the_upload_page_has_its_form(toy_suites: TestClient) -> None:
    page = toy_suites.get("/suites")
    assert page.status_code == 200
    assert 'id="suite-form"' in page.text and "webkitdirectory" in page.text
    assert "/static/suite.js" in page.text and "/static/app.js" not in page.text


def test_a_folder_is_sent_as_its_files_by_their_paths(toy_suites: TestClient) -> None:
    broken = (SUITE / "schemas" / "broken.json").read_bytes()  # quick: it does not parse
    names = ["fixture/a/broken.json", "fixture/broken.json", "fixture/notes.txt"]
    response = toy_suites.post("/api/suites", files=[("file", (n, broken)) for n in names])
    assert response.status_code == 202, response.text
    suite_id = response.json()["id"]
    page = toy_suites.get(f"/suites/{suite_id}").text
    assert [n for n in names if f'data-name="{n}"' in page] == names[:2]
    events = parse_events(toy_suites.get(f"/api/suites/{suite_id}/events").text)
    assert events[-1]["event"] == "end" and json.loads(events[-1]["data"])["total"] == 2
    cases = toy_suites.get(f"/api/suites/{suite_id}").json()["cases"]
    assert [(c["source"], c["findings"][0]["level"]) for c in cases] == [
        (names[0], "compile_error"), (names[1], "compile_error")]  # fmt: skip
    climbing = [("file", ("../person.json", b"{}"))]
    error = _error(toy_suites.post("/api/suites", files=climbing), 422)
    assert "'../person.json' climbs out of the suite" in error["message"]


def test_an_unknown_stack_is_422_at_its_index(toy_suites: TestClient) -> None:
    response = toy_suites.post(
        "/api/suites?stack=maskscope&stack=vllm-9.9", files={"file": ("s.zip", b"")}
    )
    error = _error(response, 422)
    assert error["pointer"] == "/stack/1" and "vllm-9.9" in error["message"]
    form = toy_suites.get("/suites").text
    assert 'name="stack" value="maskscope" checked' in form
    assert 'name="stack" value="vllm-0.32.0"' in form


@pytest.mark.server
def test_a_suite_checked_under_a_vllm_stack_has_that_releases_findings(
    suites_client: TestClient,
) -> None:
    tools = (SUITE.parent / "stack_suite" / "free.tools.json").read_bytes()
    response = suites_client.post(
        "/api/suites?stack=maskscope&stack=vllm-0.32.0",
        files={"file": ("free.zip", zipped({"free.tools.json": tools}))},
    )
    checked = _checked(suites_client, response)
    (source,) = checked["report"]["sources"]
    by_stack = {result["stack"]: result for result in source["results"]}
    assert set(by_stack) == {"maskscope", "vllm-0.32.0"}
    free = by_stack["vllm-0.32.0"]["unconstrained"]
    assert free, by_stack["vllm-0.32.0"]


@pytest.mark.model
def test_a_hostile_grammar_is_examined_in_the_doctors_workers_never_the_server(
    suites_client: TestClient,
) -> None:
    # xgrammar's jump-forward search on this grammar never returns and grows without bound: in
    # a server thread it would hold the thread and the server's memory; a Doctor worker is cut
    # off at its memory cap, and the suite ends with the source cut short.
    loop = {"loop.ebnf": b'root ::= "a" root\n'}
    checked = _checked(suites_client, _post_zip(suites_client, loop))
    report = checked["report"]
    assert report["error"] is None and report["done"] == 1, report
    (case,) = report["cases"]
    assert case["cut_short"] and case["compiled"], case
    assert checked["events"][-1]["event"] == "end"
