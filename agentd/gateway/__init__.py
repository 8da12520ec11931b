"""The model gateway: every model call of an attempt goes through it (docs/gateway.md). It holds the provider's
key, swaps an attempt's token for it, streams the answer through, and reads the tokens each call used from the
provider's own answer, not from what the harness says.

May import: records, config.

`usage` reads token counts from the four model APIs' answers (whole or streamed), `resets` when a limit a
429 names resets, `calls` holds the values a caller sees (the route, the call, the verdict, the record),
`wire` speaks HTTP/1.1 to the harness and `upstream` to the provider, and `server` is the gateway itself
(`Gateway`), run by the dispatcher, never by the run user.
"""
