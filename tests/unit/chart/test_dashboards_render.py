"""e2e/dashboards without a Prometheus: templating as Grafana does it, and the drawing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from e2e.dashboards import panels, render, results
from e2e.dashboards.panels import Query, Timing
from specdeploy.chart import dashboards

POOL_BOARD = panels.parse(json.loads(dashboards.files()[dashboards.POOL_FILE]))


def test_parse_keeps_every_data_panel_and_the_rows_apart() -> None:
    raw = json.loads(dashboards.files()[dashboards.POOL_FILE])
    data = [p for p in raw["panels"] if p["type"] != "row"]
    assert [p.id for p in POOL_BOARD.panels] == [p["id"] for p in data]
    assert POOL_BOARD.rows[0][0] == "K"
    assert [v.name for v in POOL_BOARD.variables] == ["namespace", "deployment", "pool"]
    styles = {p.title: p.style for p in POOL_BOARD.panels}
    assert styles["K distribution (share of steps)"] == "percent"
    assert styles["Table reload and policy errors (over the range)"] == "bars"
    acceptance = next(p for p in POOL_BOARD.panels if p.title.startswith("Live acceptance"))
    assert [q.dashed for q in acceptance.queries] == [False, True, False]  # the profile's
    table = next(p for p in POOL_BOARD.panels if p.type == "table")
    assert all(q.instant for q in table.queries)


def test_the_panels_against_plain_decoding_turn_red_below_one() -> None:
    by_title = {p.title: p for p in POOL_BOARD.panels}
    speedup = by_title["Estimated speedup over plain decoding"]
    floor = by_title["Live floor: throughput over plain decoding (R, operator)"]
    assert speedup.thresholds == floor.thresholds
    red, green = panels.THRESHOLD_COLOURS["red"], panels.THRESHOLD_COLOURS["green"]
    colours = [render.threshold_colour(speedup.thresholds, v) for v in (0.93, 0.999, 1.0, 1.4)]
    assert colours == [red, red, green, green]
    assert render.threshold_colour(by_title["Request rate (vLLM)"].thresholds, 0.5) is None


@pytest.mark.parametrize(
    ("window", "scrape", "expected"),
    [
        (600, 15, Timing(15, 60, 600, 15)),  # Grafana's default scrape: 4 scrapes
        (600, 2, Timing(2.5, 8, 600, 2.5)),
        (7200, 2, Timing(30, 32, 7200, 30)),  # a long window: interval + scrape
    ],
    ids=["default-scrape", "fast-scrape", "long-window"],
)
def test_rate_interval_is_at_least_four_scrapes_and_one_step_plus_a_scrape(
    window: float, scrape: float, expected: Timing
) -> None:
    assert panels.timing(window, scrape) == expected


def test_substitution_replaces_longest_names_first_and_both_spellings() -> None:
    t = panels.timing(600, 15)
    values = {"pool": "L40S", **panels.builtins(t)}
    expr = 'rate(x{p=~"$pool", q="${pool}"}[$__rate_interval]) + increase(y[$__range])'
    assert panels.substitute(expr, values) == (
        'rate(x{p=~"L40S", q="L40S"}[60s]) + increase(y[600s])'
    )


def test_multi_value_variables_become_an_escaped_alternation() -> None:
    # In the PromQL text a regex escape is written with two backslashes; '-' gets none.
    assert panels.regex_value(["a.b", "c-d"], multi=True) == "(a\\\\.b|c-d)"
    assert panels.regex_value(["a.b", "c"], multi=False) == "a\\\\.b"
    assert panels.regex_value(["only"], multi=True) == "only"


def test_expand_leaves_no_template_variable_in_any_query() -> None:
    variables = {"namespace": "ns", "deployment": "chat", "pool": "NVIDIA-L40S"}
    for panel in POOL_BOARD.panels:
        for q in panels.expand(panel, variables, panels.timing(600, 15)):
            assert "$" not in q.expr, (panel.title, q.expr)


def test_legend_and_units_read_as_grafana_shows_them() -> None:
    labels = {"specdeploy_pool": "NVIDIA-L40S", "k": "3"}
    assert render.legend("{{specdeploy_pool}} K={{ k }}", labels) == "NVIDIA-L40S K=3"
    assert render.legend("", {"k": "3"}) == '{k="3"}'
    assert render.unit_format("percentunit", 0.42) == "42%"
    assert render.unit_format("s", 0.0123) == "12.3 ms"
    assert render.unit_format("s", 2.5) == "2.5 s"
    assert render.unit_format("suffix: tok/s", 151.2) == "151tok/s"
    assert render.unit_format("reqps", 2.5) == "2.5 req/s"


def fake_series(i: int, end: float) -> dict[str, object]:
    labels = {"specdeploy_pool": f"pool-{i}", "k": str(i), "pod": f"p{i}", "policy": "adaptive"}
    values = [[end - 60 + s, str(0.2 + 0.1 * i + 0.001 * s)] for s in range(0, 60, 5)]
    return {"metric": {**labels, "profile": "p-1"}, "values": values, "value": [end, "1"]}


def fake_results(board: panels.Board, *, empty_title: str) -> results.BoardResult:
    """Two series per query, except the panel named ``empty_title`` (no data)."""
    end = 1_800_000_000.0
    out = []
    for panel in board.panels:
        rs = []
        for q in panel.queries:
            series = [] if panel.title == empty_title else [fake_series(i, end) for i in range(2)]
            rs.append(results.QueryResult(Query(q.ref, q.expr, q.legend, q.instant), series))
        out.append(results.PanelResult(panel, tuple(rs), end - 60, end))
    return results.BoardResult(board, {"pool": "pool\\-0"}, tuple(out))


def test_draw_makes_one_png_as_tall_as_the_grid(tmp_path: Path) -> None:
    fake = fake_results(POOL_BOARD, empty_title="Replicas (scraped vLLM pods up)")
    path = render.draw(fake, tmp_path / "pool.png")
    with Image.open(path) as image:
        width, height = image.size
    rows = max(p.grid[1] + p.grid[3] for p in POOL_BOARD.panels)
    # matplotlib truncates the pixel size: within one pixel of the grid's inches at 80 dpi
    assert abs(width - render.WIDTH_IN * 80) <= 1
    assert abs(height - (render.HEADER_IN + rows * render.ROW_IN) * 80) <= 1


def test_empty_lists_every_query_without_series_by_dashboard_and_panel() -> None:
    fake = fake_results(POOL_BOARD, empty_title="Replicas (scraped vLLM pods up)")
    problems = results.empty([fake])
    assert len(problems) == 1
    assert problems[0].startswith("specdeploy / pool / Replicas (scraped vLLM pods up) [A]")
    assert "up{" in problems[0]
