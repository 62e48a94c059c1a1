"""Issue 49, points 5 and 10, at the level of pages and the API: the bank's evidence as tables
(no knob JSON), the fork event in words, the MCP page without its token, campaign traces through
the one import form, the session list grouped by campaign with filters and orders, hidden
scenarios shown beside "all" and "visible", and suggestions that fit the session's state.
A real app on a real SQLite file; the live sessions' CPU kernels run in the harness's workers."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from app.domain.audit.timeline import payload_items, rounded
from question_bank.needs import SessionState, needs_of
from tests.server_support import ROOT, cpu_session, running_app, submit, wait_status

EVOLUTION = ROOT / "examples" / "campaigns" / "h200-2026-12-01-judge-fixed" / "h200-evolution-seed0.jsonl.xz"
STEERED = ROOT / "examples" / "h200-offline-bank-questions.jsonl"
SILENT = ROOT / "examples" / "h200-offline-silent.jsonl"


def upload(client: TestClient, path: Path) -> object:
    with path.open("rb") as f:
        return client.post("/traces/import", files={"trace": (path.name, f.read())}, follow_redirects=False)


def sessions_in(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'class="session-row" data-status="[a-z]+" data-session="(\d+)"', html)]


def test_campaign_traces_import_from_the_trace_form_and_the_list_groups_filters_and_sorts(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        r = upload(client, EVOLUTION)  # xz-compressed, format "socratic-campaign"
        assert r.status_code == 303 and r.headers["location"] == "/campaigns/1", r.text  # type: ignore[attr-defined]
        again = upload(client, EVOLUTION)
        assert again.status_code == 409 and "imported before" in again.text  # type: ignore[attr-defined]
        r = upload(client, SILENT)  # a session trace, through the same form
        assert r.status_code == 303 and r.headers["location"] == "/sessions/5/audit"  # type: ignore[attr-defined]
        bad = client.post("/traces/import", files={"trace": ("x.jsonl", b'{"type": "header", "format": "nope"}\n')})
        assert bad.status_code == 422 and "not a Socratic trace" in bad.text

        page = client.get("/").text
        assert page.count('class="campaign-row"') == 1 and "evolution with question mutations" in page
        assert sessions_in(page) == [5, 4, 3, 2, 1]  # newest first: the session, then the campaign's members
        group = page[page.index('class="campaign-row"'):page.index("</details>")]
        assert sorted(int(n) for n in re.findall(r'data-session="(\d+)"', group)) == [1, 2, 3, 4]
        assert "<details class=\"campaign-group\">" in group  # imported and finished: collapsed
        assert "agent 1 (tiling, seed 0)" in group and "member-name" not in group  # its title names it
        assert "best leader" in group and "4 stopped" in group
        assert "5 sessions · newest first" in page

        only = client.get("/", params={"q": "pauses resumed"}).text
        assert sessions_in(only) == [5] and 'class="campaign-row"' not in only and "1 of 5 sessions match" in only
        members = client.get("/", params={"q": "seed 0", "status": "stopped", "agent": "offline"}).text
        assert sorted(sessions_in(members)) == [1, 2, 3, 4] and "<details class=\"campaign-group\" open>" in members
        none = client.get("/", params={"status": "running"}).text
        assert sessions_in(none) == [] and "No session matches" in none
        fragment = client.get("/session-list", params={"sort": "leader", "status": "bogus"})
        assert fragment.headers["hx-push-url"] == "/?sort=leader" and "<html" not in fragment.text
        order = sessions_in(fragment.text)
        speeds = {s["id"]: s["leader_speedup"] for s in client.get("/api/sessions").json()}
        best_member = max(speeds[i] for i in (1, 2, 3, 4))
        first = order[:4] if best_member >= speeds[5] else order[1:]
        assert sorted(first) == [1, 2, 3, 4]
        assert [speeds[i] for i in first] == sorted((speeds[i] for i in first), reverse=True)

        # The bank's evidence: the instructions' knob records as "knob: a -> b" lines, never as JSON.
        bank = client.get("/bank").text
        assert '"tile_d64"' not in bank and "&#34;tile_d64&#34;" not in bank and "knobs {" not in bank
        assert "causal_skip: false -&gt; true" in bank and 'class="table small uses-table"' in bank
        assert "(as numbered where recorded)" in bank  # an imported instruction's session numbers are not ours
        qid = int(re.search(r'href="/bank/questions/(\d+)">For causal scenarios', bank).group(1))  # type: ignore[union-attr]
        question = client.get(f"/bank/questions/{qid}").text
        assert 'id="uses-table"' in question and "causal_skip: false -&gt; true" in question
        assert '"causal_skip"' not in question

        # Whatever a message holds is text: escaped, and a knob record is never shown as JSON.
        from question_bank.evidence import record_use

        with client.app.state.engine.ctx.database.session() as db:  # type: ignore[attr-defined]
            record_use(db, session_ref=1, text='<img src=x onerror=alert(1)>\n\nParent: session 1 candidate #2; '
                       'knobs {"<b>k</b>": "<script>alert(2)</script>"}', eval_index=0, leader=None)
        bank = client.get("/bank").text
        assert "<img src=x" not in bank and "&lt;img src=x onerror=alert(1)&gt;" in bank
        assert "<script>alert(2)" not in bank and "alert(2)" not in bank  # the knob record is not drawn


def test_the_fork_event_reads_as_words_with_rounded_numbers(tmp_path: Path) -> None:
    assert rounded(10.933651209876543) == "10.93" and rounded(0.623412345) == "0.6234" and rounded(3.0) == "3"
    assert rounded(True) == "yes" and rounded(None) == "none" and rounded(1e-7) == "1e-07"
    assert payload_items({"campaign_id": 4, "speedup": 8.737989520512352, "tags": ["a", 1.23456]}) == [
        ("campaign id", "4"), ("speedup", "8.738"), ("tags", "a; 1.235")]
    with running_app(tmp_path) as client:
        assert upload(client, STEERED).status_code == 303  # type: ignore[attr-defined]
        leader = client.get("/api/sessions/1").json()["leader_number"]
        speedup = client.get(f"/api/sessions/1/candidates/{leader}").json()["speedup"]
        r = client.post(f"/api/sessions/1/candidates/{leader}/fork",
                        json={"title": "fork <b>bold</b>", "start": False, "author": "Ada <i>L</i>"})
        assert r.status_code == 201, r.text
        fork = r.json()["id"]
        for url in (f"/sessions/{fork}/audit/timeline", f"/sessions/{fork}"):
            html = client.get(url).text
            event = html[html.index('class="event kind-forked"'):]
            event = event[:event.index("</div>")]
            assert repr(speedup) not in event and "{" not in event  # no JSON, no 16-digit float
            assert 'from <a href="/sessions/1">session 1</a>' in event
            assert f'candidate <a href="/sessions/1/candidates/{leader}">#{leader}</a> at {speedup:.3f}x' in event
            assert "by Ada &lt;i&gt;L&lt;/i&gt;" in event and "it starts here as candidate #1" in event
        # Other kinds without a sentence of their own read as fields, numbers rounded.
        timeline = client.get("/sessions/1/audit/timeline").text
        assert "&#34;" not in timeline[timeline.index('id="timeline"'):]


def test_the_mcp_page_shows_the_command_and_keeps_the_token_out_of_the_html(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        sid = cpu_session(client, [], title="outside", start=False)["id"]
        api = client.get(f"/api/sessions/{sid}/mcp").json()  # the JSON API as it was
        assert api["token"].startswith("sk-socratic-") and api["token"] in api["claude_code"]
        html = client.get(f"/sessions/{sid}/mcp").text
        assert api["token"] not in html and "sk-socratic-" not in html
        assert api["url"] in html and f"claude mcp add --transport http socratic-{sid} {api['url']}" in html
        assert 'id="show-token"' in html and f'data-api="/api/sessions/{sid}/mcp"' in html
        assert 'src="/static/mcp.js"' in html and "only a session whose agent is <code>mcp</code>" in html
        assert client.get("/static/mcp.js").status_code == 200
        missing = client.get("/sessions/999/mcp")
        assert missing.status_code == 404 and "<html" in missing.text


def test_hidden_scenarios_beside_all_and_visible_and_suggestions_that_fit(tmp_path: Path) -> None:
    steps = [submit("correct_30ms", "slower than the baseline"), {"say": "I'm done.", "end_turn": True}]
    with running_app(tmp_path) as client:
        early = cpu_session(client, [], title="nothing yet", start=False)["id"]
        for trigger in ("plateau", "declared_limit", "manual"):
            ranked = client.get(f"/api/sessions/{early}/bank/suggestions",
                                params={"trigger": trigger, "limit": 50}).json()
            assert ranked and all(needs_of(q["text"]).unmet(SessionState(0, False, False)) is None for q in ranked)
            assert "which-part-not-touched" not in {q["key"] for q in ranked}

        sid = cpu_session(client, steps, title="one slow kernel")["id"]
        state = wait_status(client, sid, "paused")
        assert state["evaluations"] == 1 and state["leader_number"] is None
        page = client.get(f"/sessions/{sid}").text
        note = re.search(r'id="hidden-note">(.*?)</p>', page)
        assert note and note.group(1).startswith("1 of 4 scenarios are hidden from the agent")
        assert "<th" in page and "hidden (1)</th>" in page
        cell = re.search(r'class="hidden-cell">([^<]*)<span class="muted small">(\d+)/(\d+) passed', page)
        assert cell and re.fullmatch(r"\d+\.\d{3}x ", cell.group(1)) and cell.group(3) == "1"
        assert "cpu-chunk-hidden" not in page[page.index('id="candidates"'):page.index('id="interventions"')]
        # The pause's suggestions: none that needs a leader or more than one evaluation.
        banner = page[page.index('id="pause-banner"'):page.index('id="chart"')]
        texts = re.findall(r'data-suggestion="([^"]*)"', banner)
        assert texts and all(needs_of(t.replace("&#39;", "'")).unmet(SessionState(1, False, True)) is None
                             for t in texts)
        ranked = client.get(f"/api/sessions/{sid}/bank/suggestions", params={"limit": 50}).json()
        assert all(not needs_of(q["text"]).leader and needs_of(q["text"]).evaluations <= 1 for q in ranked)

        # A session without hidden scenarios shows no hidden column.
        assert upload(client, SILENT).status_code == 303  # type: ignore[attr-defined]
        imported = client.get("/sessions/3").text
        assert 'id="hidden-note"' not in imported and "hidden-cell" not in imported


def test_the_all_column_says_how_many_scenarios_its_geomean_is_over(tmp_path: Path) -> None:
    steps = [submit("correct_5ms", "twice as fast"), {"say": "I'm done.", "end_turn": True}]
    with running_app(tmp_path) as client:
        full = cpu_session(client, steps, title="every baseline timed")["id"]
        wait_status(client, full, "paused")
        # a baseline that refuses head_dim 64: those scenarios pass, but have no ratio to the baseline
        part = cpu_session(client, steps, title="the baseline fails on d64",
                           baseline="tests.cpu_kernels:not_supported_d64")["id"]
        wait_status(client, part, "paused")
        cells = {}
        for sid in (full, part):
            page = client.get(f"/sessions/{sid}").text
            found = re.search(
                r'<span class="muted small timed-count( partial)?" title="[^"]*">(\d+)/(\d+) timed</span>', page)
            assert found, page[page.index('id="candidates"'):page.index('id="interventions"')]
            cells[sid] = (bool(found.group(1)), int(found.group(2)), int(found.group(3)))
        assert cells[full][0] is False and cells[full][1] == cells[full][2] == 4
        timed_part = cells[part]
        assert timed_part[0] is True and 0 < timed_part[1] < timed_part[2] == 4
        report = client.get(f"/api/sessions/{part}/candidates/1").json()
        assert report["passed"] == 4  # all passed: only the ratio is over fewer
