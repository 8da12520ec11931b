"""The console's charts page and its numbers through the API (docs/web.md, "Charts"): the queue over
time, the outcomes per hour and the cost per day, drawn on the server as SVG (agentd/web/svg.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentd.web.app import bearer, web_of
from agentd.web.charts import charts_view, drawn
from agentd.web.console import page, viewer


async def charts_page(request: Request) -> Response:
    """GET /charts: the three charts, each with its numbers in a table beside it."""
    operator, csrf = await viewer(request)
    web = web_of(request)
    view = await web.db.call(lambda store: charts_view(store, web.clock.now()))
    return page(request, "charts.html", operator, csrf, charts=view, drawn=drawn(view))


async def api_charts(request: Request) -> Response:
    """GET /api/charts: the numbers the charts page draws."""
    await bearer(request)
    web = web_of(request)
    return JSONResponse(await web.db.call(lambda store: charts_view(store, web.clock.now())))


def routes() -> list[BaseRoute]:
    return [Route("/charts", charts_page), Route("/api/charts", api_charts)]
