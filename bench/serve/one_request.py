#!/usr/bin/env python3
"""One infer request at a time on one kept-alive connection: the time from the first byte sent to
the whole answer read, N times (docs/benchmarks.md, "the infer request's read, before and after").

  bench/serve/one_request.py HOST:PORT MODEL BODY.json [N]
"""
import socket
import sys
import time


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    model, body = sys.argv[2], open(sys.argv[3], "rb").read()
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    req = (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(n):
        t0 = time.perf_counter()
        s.sendall(req)
        buf = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                raise SystemExit("the server closed the connection")
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                if len(rest) >= length:
                    break
        status = head.split(b" ", 2)[1].decode()
        print(f"{1e3 * (time.perf_counter() - t0):.2f} ms, status {status}, {len(body)} bytes sent")


if __name__ == "__main__":
    main()
