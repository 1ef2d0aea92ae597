#!/usr/bin/env python3
"""Clients that go away: at RATE requests per second for SECONDS, each one a completion
that is abandoned mid-way, in turn:
  - a stream closed after its first event,
  - a stream closed after a few events,
  - a non-streamed request closed before the answer,
  - a request whose body is never finished (the server's header timeout ends it).
Prints one JSON line with the counts. Standard library only."""
import json
import random
import socket
import sys
import threading
import time


def request(port, body, stream):
    data = json.dumps(body | {"stream": stream}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    return head, data


def one(port, kind, out, lock):
    body = {"model": "m", "prompt": "And it came to pass", "max_tokens": 48, "temperature": 0.8,
            "ignore_eos": True}
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        if kind == "partial_body":
            head, data = request(port, body, False)
            s.sendall(head + data[: len(data) // 2])
            time.sleep(0.5)
        else:
            head, data = request(port, body, kind != "before_answer")
            s.sendall(head + data)
            if kind == "after_first_event":
                s.recv(4096)
            elif kind == "after_some_events":
                got = 0
                while got < 4:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk.count(b"data:")
            else:
                time.sleep(random.uniform(0.01, 0.2))
        s.close()
        with lock:
            out[kind] = out.get(kind, 0) + 1
    except OSError as e:
        with lock:
            out["client_errors"] = out.get("client_errors", 0) + 1
            out["last_error"] = str(e)


def main():
    port, rate, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    kinds = ["after_first_event", "after_some_events", "before_answer", "partial_body"]
    out, lock, threads = {}, threading.Lock(), []
    rng = random.Random(7)
    end = time.time() + seconds
    i = 0
    while time.time() < end:
        t = threading.Thread(target=one, args=(port, kinds[i % len(kinds)], out, lock), daemon=True)
        t.start()
        threads.append(t)
        i += 1
        time.sleep(rng.expovariate(rate))
    for t in threads:
        t.join(timeout=60)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
