"""Which ports Serve's HAProxy is given: held ones are replaced, closed ones are not."""

from __future__ import annotations

import socket

from paddleray.services.exporter.serving.control.ports import bindable, settle


def _listener() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_a_port_whose_listener_closed_connections_first_is_bindable_while_they_linger_in_time_wait():
    # A REST client's "Connection: close": the server closes first, and its side of the
    # connection stays in TIME_WAIT on the listening port after the listener is gone.
    listener = _listener()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()
    client.recv(1)
    client.close()
    listener.close()
    with socket.socket() as plain:  # the lingering connection is there: a plain bind fails
        try:
            plain.bind(("127.0.0.1", port))
            lingering = False
        except OSError:
            lingering = True
    assert lingering, "no TIME_WAIT connection was left: the test shows nothing"
    assert bindable("127.0.0.1", port)
    assert settle("127.0.0.1", (port,)) == (port,)


def test_a_port_another_process_listens_on_is_replaced_by_a_free_one():
    listener = _listener()
    try:
        port = listener.getsockname()[1]
        assert not bindable("127.0.0.1", port)
        (chosen,) = settle("127.0.0.1", (port,))
        assert chosen != port and bindable("127.0.0.1", chosen)
    finally:
        listener.close()
