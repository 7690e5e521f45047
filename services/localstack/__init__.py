"""The local stack: Redis, a Ray head and the three services as background processes.

`paddleray up` / `paddleray down` (and the test suite's fixtures) use it.
"""
