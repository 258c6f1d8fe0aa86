"""The fleet source against hostile or broken HTTP servers (real sockets on 127.0.0.1): every
failure is one line in FleetSnapshot.error, nothing hangs past the deadline, nothing is read
past the cap, no redirect is followed, TLS is verified."""
import gzip
import http.server
import json
import socket
import ssl
import subprocess
import threading
import urllib.parse

import pytest

from console.sources.prometheus import PrometheusSource

OK = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"Hostname": "gpu01", "gpu": "0"}, "value": [1.0, "71000"]}]}}).encode()


def vector(*samples):
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": m, "value": [1.0, v]} for m, v in samples]}}).encode()


def prometheus_like(h):
    """Answers each of the round's queries as a Prometheus holding one GPU would."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query)["query"][0]
    g = {"Hostname": "gpu01", "gpu": "0"}
    if query.startswith("count by"):
        body = vector(({**g, "UUID": "GPU-a", "modelName": "NVIDIA H100 80GB HBM3"}, "1"))
    elif query == "max by (Hostname, gpu, GPU_I_ID) (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)":
        body = vector((g, "97000"))
    elif query.startswith("max by (Hostname, gpu, GPU_I_ID) (DCGM_FI_DEV_FB_USED)"):
        body = vector((g, "71000"))
    elif query.startswith("max by (Hostname, gpu, GPU_I_ID) (DCGM_FI_DEV_FB_FREE)"):
        body = vector((g, "26000"))
    elif query.startswith("max by (Hostname, gpu, GPU_I_ID) (DCGM_FI_DEV_GPU_UTIL)"):
        body = vector((g, "0"))
    else:
        body = vector()
    reply(200, body, Content_Type="application/json")(h)


class Stub:
    """A one-purpose HTTP(S) server: ``answer(handler)`` writes the response."""

    def __init__(self, answer, tls=None):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append((self.path, self.headers.get("Authorization")))
                answer(self)

            def log_message(self, *a):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(status, body=b"", **headers):
    def answer(h):
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k.replace("_", "-"), v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return answer


@pytest.fixture
def stub():
    made = []

    def make(answer, tls=None):
        s = Stub(answer, tls)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


async def poll(target, **kw):
    return await PrometheusSource(target, window_s=5, **kw).poll()


async def test_an_answer_becomes_nodes_and_the_token_goes_along(stub, tmp_path):
    s = stub(prometheus_like)
    (tmp_path / "tok").write_text("s3cret\n")
    snap = await poll(f"prometheus://127.0.0.1:{s.port}", token_file=str(tmp_path / "tok"))
    assert snap.error is None and snap.nodes[0].hostname == "gpu01"
    g = snap.nodes[0].gpus[0]
    assert (g.memory_used_mib, g.memory_total_mib, g.utilization_pct, g.uuid) == (71000, 97000, 0, "GPU-a")
    assert {auth for _, auth in s.seen} == {"Bearer s3cret"}
    assert all(path.startswith("/api/v1/query?query=") for path, _ in s.seen)
    assert any("plain HTTP" in w for w in snap.warnings)


async def test_nothing_listening_is_refused():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    snap = await poll(f"prometheus://127.0.0.1:{port}")
    assert "refused" in snap.error and snap.nodes == ()


async def test_a_prometheus_that_hangs_times_out():
    with socket.socket() as sock:               # accepts (backlog), never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        snap = await poll(f"prometheus://127.0.0.1:{sock.getsockname()[1]}", timeout_s=0.5)
    assert "timed out" in snap.error and "\n" not in snap.error


async def test_prometheus_error_text_and_status(stub):
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": "1:5: parse error\n[red]x"}).encode()
    s = stub(reply(400, body, Content_Type="application/json"))
    snap = await poll(f"prometheus://127.0.0.1:{s.port}")
    assert snap.error == "HTTP 400 Bad Request: Prometheus error: bad_data: 1:5: parse error [red]x"


async def test_unauthorised_says_authentication(stub):
    s = stub(reply(401, b"no"))
    snap = await poll(f"prometheus://127.0.0.1:{s.port}")
    assert snap.error.startswith("HTTP 401") and "authentication" in snap.error


async def test_a_redirect_is_not_followed_and_the_token_stays(stub, monkeypatch):
    elsewhere = stub(reply(200, OK))
    s = stub(reply(302, b"", Location=f"http://127.0.0.1:{elsewhere.port}/api/v1/query"))
    monkeypatch.setenv("GPU_INCIDENT_PROMETHEUS_TOKEN", "s3cret")
    snap = await poll(f"prometheus://127.0.0.1:{s.port}")
    assert "redirect" in snap.error and "not followed" in snap.error
    assert elsewhere.seen == []


async def test_a_huge_answer_is_cut_at_the_cap(stub):
    s = stub(reply(200, b" " * (3 << 20) + OK))
    snap = await poll(f"prometheus://127.0.0.1:{s.port}", max_bytes=1 << 20)
    assert "too large" in snap.error


async def test_a_gzip_bomb_is_cut_at_the_cap(stub):
    bomb = gzip.compress(b" " * (8 << 20), 6)
    s = stub(reply(200, bomb, Content_Encoding="gzip"))
    snap = await poll(f"prometheus://127.0.0.1:{s.port}", max_bytes=1 << 20)
    assert "too large" in snap.error


async def test_gzip_answers_are_read(stub):
    s = stub(reply(200, gzip.compress(OK), Content_Encoding="gzip"))
    snap = await poll(f"prometheus://127.0.0.1:{s.port}")
    assert snap.error is None and snap.nodes[0].hostname == "gpu01"


async def test_not_prometheus_at_all(stub):
    s = stub(reply(200, b"<html>welcome</html>"))
    snap = await poll(f"prometheus://127.0.0.1:{s.port}")
    assert snap.error == "answer is not JSON (is this Prometheus?)"


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {r.stderr.strip()[:200]}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    return ctx, str(d / "cert.pem")


async def test_tls_with_a_self_signed_certificate_is_refused_unless_trusted(stub, self_signed):
    ctx, cert = self_signed
    s = stub(reply(200, OK), tls=ctx)
    refused = await poll(f"prometheus+https://127.0.0.1:{s.port}")
    assert "not trusted" in refused.error and refused.nodes == ()
    trusted = await poll(f"prometheus+https://127.0.0.1:{s.port}", ca_file=cert)
    assert trusted.error is None and trusted.nodes[0].hostname == "gpu01"
    assert not any("plain HTTP" in w for w in trusted.warnings)


def test_a_bad_ca_file_is_one_line(tmp_path):
    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(ValueError, match="cannot use CA file"):
        PrometheusSource("prometheus+https://127.0.0.1:1", ca_file=str(tmp_path / "ca.pem"))


async def test_the_window_queries_are_asked_every_tenth_of_the_window(stub, monkeypatch):
    """IDLE and XID (Prometheus's costliest) are asked again after a tenth of the window, at most
    a minute; the other queries every round."""
    s = stub(prometheus_like)
    target = f"prometheus://127.0.0.1:{s.port}"

    def asked(word):
        return sum(word in urllib.parse.unquote_plus(path) for path, _ in s.seen)
    long = PrometheusSource(target, window_s=600)
    for _ in range(3):
        snap = await long.poll()
        assert snap.error is None and snap.nodes[0].gpus[0].last_xid == 0
    assert asked("min_over_time") == 1 and asked("GPU_I_ID) (DCGM_FI_DEV_FB_USED)") == 3
    s.seen.clear()
    from console.sources.prometheus import source
    monkeypatch.setattr(source, "WINDOW_REFRESH_MAX_S", 0.0)     # refresh due at every round
    for _ in range(3):
        await long.poll()
    assert asked("min_over_time") == 3


async def test_the_memory_total_is_asked_with_the_uuids_not_every_round(stub):
    """FB_USED + FB_FREE (the framebuffer's size) does not change: asked with INFO; a round asks
    FB_USED and GPU_UTIL, and every round still has the total."""
    s = stub(prometheus_like)
    src = PrometheusSource(f"prometheus://127.0.0.1:{s.port}", window_s=600)
    for _ in range(3):
        snap = await src.poll()
        assert snap.nodes[0].gpus[0].memory_total_mib == 97000 and not snap.warnings[1:], snap.warnings
    queries = [urllib.parse.unquote_plus(path) for path, _ in s.seen]
    assert sum("FB_USED + DCGM_FI_DEV_FB_FREE" in q for q in queries) == 1
    assert not any("(DCGM_FI_DEV_FB_FREE)" in q for q in queries)


async def test_a_failed_total_is_asked_again_the_next_round_not_a_minute_later(stub):
    failures = []

    def flaky(h):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query)["query"][0]
        if "FB_USED + DCGM_FI_DEV_FB_FREE" in query and not failures:
            failures.append(query)
            return reply(500, b"busy")(h)
        return prometheus_like(h)
    s = stub(flaky)
    src = PrometheusSource(f"prometheus://127.0.0.1:{s.port}", window_s=600)
    first = await src.poll()
    assert first.nodes[0].gpus[0].memory_total_mib is None and any("total query failed" in w for w in first.warnings)
    second = await src.poll()
    assert second.nodes[0].gpus[0].memory_total_mib == 97000 and second.nodes[0].gpus[0].uuid == "GPU-a"


def drip(stop: threading.Event):
    """Headers saying a megabyte comes, then a byte every 0.2 s (a socket timeout per read never fires)."""
    def answer(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", "1000000")
        h.end_headers()
        h.wfile.flush()
        while not stop.is_set():
            try:
                h.wfile.write(b" ")
                h.wfile.flush()
            except OSError:
                return                    # the client cut it: the point
            stop.wait(0.2)
    return answer


def test_a_dripping_answer_is_cut_at_its_deadline_not_read_for_ever(stub):
    """One deadline for the whole answer: the read returns, with one line, soon after it."""
    import time as _time

    from console.sources.prometheus import client
    stop = threading.Event()
    s = stub(drip(stop))
    try:
        t0 = _time.monotonic()
        with pytest.raises(client.FetchError) as exc:
            client.fetch(client.make_opener(None), f"http://127.0.0.1:{s.port}/api/v1/query?query=up",
                         host="127.0.0.1", port=s.port, timeout=1.0)
        took = _time.monotonic() - t0
    finally:
        stop.set()
    assert "timed out after 1 s (the answer did not finish" in str(exc.value)
    assert took < 10, took            # bounded (1 s and one read), never the megabyte's 55 hours


async def test_stuck_reads_never_take_the_loops_pool(stub):
    """The round's reads run in daemon threads of the source's own: the loop's default pool (a
    signal's, a DNS lookup's) stays free while a server holds them."""
    import asyncio
    import concurrent.futures
    stop = threading.Event()
    s = stub(drip(stop))
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(pool)
    try:
        src = PrometheusSource(f"prometheus://127.0.0.1:{s.port}", window_s=5, timeout_s=2.0)
        round_ = asyncio.create_task(src.poll())
        await asyncio.sleep(0.3)                         # its reads are held by the server now
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 1.0) == "free"
        snap = await asyncio.wait_for(round_, 15)
        assert "timed out" in snap.error
    finally:
        stop.set()
        pool.shutdown(wait=False)


def test_snapshot_of_a_dripping_prometheus_returns(stub, tmp_path):
    """`gpu-incident snapshot prometheus://… --probe-timeout 2` returns (it never returned)."""
    import os
    import sys
    import time as _time
    stop = threading.Event()
    s = stub(drip(stop))
    try:
        t0 = _time.monotonic()
        p = subprocess.run([sys.executable, "-m", "console", "snapshot", f"prometheus://127.0.0.1:{s.port}",
                            "--probe-timeout", "2", "--json"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, HOME=str(tmp_path)))
        took = _time.monotonic() - t0
    finally:
        stop.set()
    assert p.returncode == 0, p.stderr
    node, = json.loads(p.stdout)["nodes"]
    assert node["error"].endswith("timed out after 2 s")
    assert took < 30, took


def test_no_proxy_from_the_environment_carries_the_token(stub, monkeypatch, tmp_path):
    """http_proxy/https_proxy are not taken from the environment: the query (and its bearer
    token) goes to Prometheus itself, never to whatever the variables name."""
    import asyncio
    proxy_saw = []
    proxy = stub(lambda h: (proxy_saw.append(h.path), reply(502, b"proxy")(h)))
    s = stub(prometheus_like)
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{proxy.port}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    (tmp_path / "tok").write_text("s3cret\n")
    snap = asyncio.run(PrometheusSource(f"prometheus://127.0.0.1:{s.port}", window_s=5,
                                        token_file=str(tmp_path / "tok")).poll())
    assert snap.error is None and proxy_saw == [] and {a for _, a in s.seen} == {"Bearer s3cret"}


@pytest.mark.parametrize("timeout", [300.5, 600.0])
def test_the_probe_timeouts_whole_range_is_taken_with_a_fleet_target(timeout):
    src = PrometheusSource("prometheus://127.0.0.1:9", timeout_s=timeout)
    assert src.timeout_s == timeout


async def test_an_answer_of_too_many_series_is_refused_before_it_is_parsed(stub):
    """200,000 series in one answer (a mislabelled exporter, a hostile Prometheus): one line,
    never the gigabytes parsing it would take."""
    from console.sources.prometheus.parse import MAX_SERIES
    row = b'{"metric":{"Hostname":"gpu01","gpu":"0"},"value":[1.0,"71000"]},'
    body = b'{"status":"success","data":{"resultType":"vector","result":[' + row * 200_000 + \
        b'{"metric":{},"value":[1.0,"0"]}]}}'
    s = stub(reply(200, body, Content_Type="application/json"))
    snap = await poll(f"prometheus://127.0.0.1:{s.port}")
    assert snap.error.startswith("answer has 200,001 series, more than the") and f"{MAX_SERIES:,}" in snap.error
