"""The /web playground in a real browser: episodes on echo, chess and Atari through the page,
two browser contexts at once (two visitors, two sessions). Screenshots: test-artifacts/web/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.server import RunningServer, serve
from tests.web.browser import browser, click_and_wait, open_playground, reset, screenshot

__all__ = ["browser"]  # the fixture, imported for pytest

pytestmark = pytest.mark.slow

WEB = {"ENABLE_WEB_INTERFACE": "1"}


@pytest.fixture
def two_visitors(browser: Any) -> Iterator[tuple[Any, Any]]:
    first = browser.new_context(viewport={"width": 1280, "height": 900})
    second = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def _serve(app: str, env: dict[str, str] | None = None) -> Any:
    # The variables are read while the app is built, so the server can run in this process.
    return serve(app, env={**WEB, **(env or {})}, in_process=True)


def _session(page: Any) -> str:
    return str(page.evaluate("document.body.dataset.session"))


def test_echo_tools_in_two_sessions(two_visitors: tuple[Any, Any]) -> None:
    server: RunningServer
    with _serve("echo_env.server.app:app") as server:
        alice, bob = (open_playground(context, server.url + "/web/") for context in two_visitors)
        assert _session(alice) != _session(bob)
        # An MCP environment: its tools, each with a form, instead of the raw action form.
        tools = alice.locator("#tools form.tool")
        assert sorted(tools.evaluate_all("forms => forms.map(f => f.dataset.tool)")) == [
            "echo_message",
            "echo_with_length",
        ]
        for page in (alice, bob):
            reset(page)
        alice.fill("form[data-tool=echo_message] [name=message]", "hello from alice")
        click_and_wait(alice, "form[data-tool=echo_message] button")
        alice.fill("form[data-tool=echo_with_length] [name=message]", "four")
        click_and_wait(alice, "form[data-tool=echo_with_length] button")
        bob.fill("form[data-tool=echo_message] [name=message]", "bob here")
        click_and_wait(bob, "form[data-tool=echo_message] button")

        assert "four" in alice.inner_text("#observation")
        assert alice.locator("#history tbody tr").count() == 3  # reset + two calls
        assert bob.locator("#history tbody tr").count() == 2  # his own episode only
        assert "bob here" in bob.inner_text("#observation")
        assert "alice" not in bob.inner_text("#history")
        # Each page's session counts its own steps.
        click_and_wait(alice, "#state")
        assert '"step_count": 2' in alice.inner_text("#raw")
        click_and_wait(bob, "#state")
        assert '"step_count": 1' in bob.inner_text("#raw")
        screenshot(alice, "echo")


def test_chess_board_and_moves(two_visitors: tuple[Any, Any]) -> None:
    with _serve("chess_env.server.app:app") as server:
        white, other = (open_playground(context, server.url + "/web") for context in two_visitors)
        reset(white)
        reset(other)
        board = white.inner_text("[data-field=board]")
        assert "♖" in board and "a b c d e f g h" in board  # the env's own renderer drew it
        if "you play black" in white.inner_text("#observation"):
            reset(white)  # colours alternate per episode: take white for a fixed first move
        white.fill("#action-form [name=move]", "e2e4")
        click_and_wait(white, "#step")
        assert white.inner_text("#steps") == "1"
        assert white.locator("#history tbody tr").count() == 2
        # An illegal move is the environment's penalty, shown as the step's reward.
        white.fill("#action-form [name=move]", "e1e8")
        click_and_wait(white, "#step")
        assert white.inner_text("#reward") == "-0.1"
        # The other visitor's board has not moved.
        assert other.locator("#history tbody tr").count() == 1
        assert "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR" in other.inner_text("#observation")
        screenshot(white, "chess")


def distinct_colours(canvas: Any) -> int:
    """Colours drawn on a canvas: a frame drawn as a picture has more than a blank one's."""
    return int(
        canvas.evaluate(
            "c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            " const seen = new Set(); for (let i = 0; i < d.length; i += 4)"
            " seen.add(d[i] << 16 | d[i+1] << 8 | d[i+2]); return seen.size; }"
        )
    )


def test_atari_frame_as_picture(two_visitors: tuple[Any, Any]) -> None:
    with _serve("atari_env.server.app:app") as server:
        first, second = (open_playground(context, server.url + "/web/") for context in two_visitors)
        reset(first, seed=7)
        reset(second, seed=7)
        canvas = first.locator("[data-field=screen] canvas")
        assert canvas.evaluate("c => [c.width, c.height]") == [160, 210]
        # The picture is the frame: not a blank canvas.
        assert distinct_colours(canvas) > 2
        # action_id is an integer field; the legal actions are offered as choices.
        assert first.locator("#action-form [name=action_id]").get_attribute("type") == "number"
        assert first.locator("#action-form datalist option").count() >= 2
        for _ in range(3):
            first.fill("#action-form [name=action_id]", "2")
            click_and_wait(first, "#step")
        assert first.inner_text("#steps") == "3"
        assert first.inner_text("#done") == "no"
        assert second.locator("#history tbody tr").count() == 1
        # An out-of-range action is a clear error on the page; the session goes on.
        first.fill("#action-form [name=action_id]", "99")
        click_and_wait(first, "#step")
        assert "99" in first.inner_text("#error") or "action" in first.inner_text("#error")
        first.fill("#action-form [name=action_id]", "0")
        click_and_wait(first, "#step")
        assert first.inner_text("#steps") == "4"
        assert first.locator("#error").is_hidden()
        screenshot(first, "atari")


def test_atari_raw_bytes_frame_as_picture(browser: Any) -> None:
    """A raw-bytes frame reaches the page (which negotiates no binary frames) as base64 text
    in `frame_bytes`, and is drawn as the same picture as OpenEnv's int list."""
    with _serve("tests.web.atari_apps:atari_bytes") as server:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = open_playground(context, server.url + "/web/")
            reset(page, seed=7)
            canvas = page.locator("[data-field=frame] canvas")
            assert canvas.evaluate("c => [c.width, c.height]") == [160, 210]
            assert distinct_colours(canvas) > 2
        finally:
            context.close()


def test_behind_a_prefix_with_an_api_key_and_a_custom_renderer(browser: Any) -> None:
    from tests.web.apps import KEY, PREFIX

    with serve("tests.web.apps:prefixed", in_process=True) as server:
        context = browser.new_context(viewport={"width": 1100, "height": 700})
        try:
            page = context.new_page()
            page.set_default_timeout(60_000)
            page.goto(server.url + PREFIX + "/")  # redirected to <prefix>/web/
            assert page.url == server.url + PREFIX + "/web/"
            page.wait_for_selector("#auth:not([hidden])")  # the page asks for the key
            page.fill("#api-key", KEY)
            page.click("#auth-form button")
            page.wait_for_selector("body[data-ready=true]")
            reset(page, seed=3)
            page.fill("#action-form [name=amount]", "2")
            click_and_wait(page, "#step")
            assert page.inner_text("[data-field=custom-count]").startswith("count = ")
            assert page.inner_text("#steps") == "1"
            # The environment's error is shown; the session stays usable.
            page.fill("#action-form [name=amount]", "13")
            click_and_wait(page, "#step")
            assert "EXECUTION_ERROR" in page.inner_text("#error")
            page.fill("#action-form [name=amount]", "1")
            click_and_wait(page, "#step")
            assert page.inner_text("#steps") == "2"
            screenshot(page, "counter-prefix-key")
        finally:
            context.close()


def test_form_from_schema_enums_bounds_nested(browser: Any) -> None:
    with serve("tests.web.apps:moves", in_process=True) as server:
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        try:
            page = open_playground(context, server.url + "/web/")
            form = "#action-form "
            options = page.locator(form + "select[name=direction] option")
            assert options.all_inner_texts() == ["north", "south", "east", "west"]
            speed = page.locator(form + "[data-field=speed] input")
            assert (speed.get_attribute("min"), speed.get_attribute("max")) == ("0", "5")
            assert speed.input_value() == "1"  # the default
            assert page.locator(form + "fieldset[data-field=target] input").count() == 2
            assert page.inner_text(form + "fieldset[data-field=target] legend") == "Target"
            assert page.locator(form + "[name=sprint]").get_attribute("type") == "checkbox"

            reset(page)
            assert page.locator("[data-field=board] pre.board").count() == 1  # a 2-D list
            page.select_option(form + "select[name=direction]", label="east")
            page.fill(form + "[data-field=speed] input", "2.5")
            page.fill(form + "fieldset[data-field=target] [name=x]", "1")
            page.fill(form + "fieldset[data-field=target] [name=y]", "2")
            page.check(form + "[name=sprint]")
            page.fill(form + "[name=tags]", '["fast"]')
            click_and_wait(page, "#step")
            assert page.locator("#error").is_hidden(), page.inner_text("#error")
            received = page.evaluate("openenvPlayground.lastReply.observation.received")
            assert received == {
                "direction": "east",
                "speed": 2.5,
                "target": {"x": 1, "y": 2},
                "sprint": True,
                "tags": ["fast"],
                "note": None,
            }
            assert page.inner_text("#reward") == "2.5"
            assert ". . .\n. . .\n. X ." in page.inner_text("[data-field=board]")
            # Out of bounds: the browser itself refuses to send the form.
            x_field = page.locator(form + "fieldset[data-field=target] [name=x]")
            x_field.fill("12")
            assert x_field.evaluate("input => input.validity.rangeOverflow")
            x_field.fill("0")
            # What only the server can check: its validation error is shown, the session goes on.
            page.fill(form + "[name=tags]", "[1]")
            click_and_wait(page, "#step")
            assert "VALIDATION_ERROR" in page.inner_text("#error")
            assert "tags" in page.inner_text("#error")
            page.fill(form + "[name=tags]", "")
            click_and_wait(page, "#step")
            assert page.inner_text("#steps") == "2"
            screenshot(page, "forms")
        finally:
            context.close()
