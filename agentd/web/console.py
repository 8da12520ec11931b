from starlette.routing import BaseRoute


def routes() -> list[BaseRoute]:
    return []
