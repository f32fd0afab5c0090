"""Check the built site as a reader meets it.

    python docs/check_site.py [docs/_build/html]

1. Every link and image in every page points at a file of the site that exists, and
   every ``#anchor`` at an element of that page (the site is built offline: a link
   leaving it is listed, not followed).
2. Headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright) opens the
   index, the API reference, the benchmarks page and every gallery page from a local
   server: no console errors, no failed requests, no request leaving the site, every
   image drawn, the content a reader looks for present; a screenshot of each is kept
   in ``<site>/../screenshots/``.

Exits with status 1 and a list of what is wrong.
"""
import functools
import http.server
import os
import pathlib
import sys
import threading
import urllib.parse
from html.parser import HTMLParser

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# The pages opened in the browser, and a text each must show.
PAGES = {"index.html": "Fast gradients of array code",
         "api.html": "dualbcast.value_and_grad",
         "benchmarks.html": "Programs written as users write them",
         "guide/performance.html": "Writing fast programs"}


# What the API page must show as rendered entries (their anchors, autodoc's ids).
API_NAMES = ["dualbcast.fast_broadcast", "dualbcast.FastBroadcast",
             "dualbcast.FastBroadcast.__call__", "dualbcast.FastBroadcast.sum",
             "dualbcast.FastBroadcast.value_and_partials",
             "dualbcast.FastBroadcast.sum_and_partials",
             "dualbcast.FastBroadcast.sum_hessian_diagonal", "dualbcast.FastBroadcast.jvp",
             "dualbcast.FastBroadcast.sum_jvp", "dualbcast.KernelCompileError",
             "dualbcast.FrozenDependencyChanged", "dualbcast.grad", "dualbcast.value_and_grad",
             "dualbcast.vjp", "dualbcast.jvp", "dualbcast.stop_gradient", "dualbcast.hessian",
             "dualbcast.jacobian", "dualbcast.jacfwd", "dualbcast.jacrev", "dualbcast.vmap",
             "dualbcast.jit", "dualbcast.config.Config", "dualbcast.torch.wrap",
             "dualbcast.torch.TorchOp", "dualbcast.jax.wrap", "dualbcast.jax.Op",
             "dualbcast.scipy.objective", "dualbcast.scipy.Objective",
             "dualbcast.dask.BlockwiseCall"]


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "name" in attrs:
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") == "preconnect"):
                self.links.append(attrs[key])


def _parsed(path, cache={}):
    if path not in cache:
        parser = _Links()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = parser
    return cache[path]


def check_links(site):
    problems, external = [], set()
    for page in sorted(site.rglob("*.html")):
        for link in _parsed(page).links:
            parts = urllib.parse.urlsplit(link)
            if parts.scheme in ("http", "https", "mailto", "data", "javascript"):
                if parts.scheme in ("http", "https"):
                    external.add(link)
                continue
            target = page if not parts.path else (page.parent / urllib.parse.unquote(
                parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = page.relative_to(site)
            if not target.exists():
                problems.append(f"{where}: broken link {link}")
            elif parts.fragment and target.suffix == ".html" \
                    and parts.fragment not in _parsed(target).ids:
                problems.append(f"{where}: no anchor #{parts.fragment} in {target.name}")
    return problems, sorted(external)


def _serve(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def check_in_browser(site, shots):
    from playwright.sync_api import sync_playwright

    pages = dict(PAGES)
    for example in sorted((site / "gallery").glob("plot_*.html")):
        pages[str(example.relative_to(site))] = "Total running time of the script"
    server = _serve(site)
    origin = f"http://127.0.0.1:{server.server_address[1]}/"
    problems = []
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"])
        for name, text in pages.items():
            seen = []
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: m.type == "error" and seen.append(f"console: {m.text}"))
            page.on("pageerror", lambda e: seen.append(f"script error: {e}"))
            page.on("requestfailed", lambda r: seen.append(f"request failed: {r.url}"))
            page.on("response", lambda r: r.status >= 400 and seen.append(
                f"HTTP {r.status}: {r.url}"))
            page.route("**/*", lambda route: route.continue_()
                       if route.request.url.startswith(origin)
                       else (seen.append(f"request leaving the site: {route.request.url}"),
                             route.abort()))
            page.goto(origin + name, wait_until="networkidle")
            if text not in page.inner_text("body"):
                seen.append(f"does not show {text!r}")
            raw = [marker for marker in (".. py:", ".. auto", ":meth:`", ":class:`", ":func:`")
                   if marker in page.inner_text("body")]
            seen += [f"shows unrendered reStructuredText: {marker!r}" for marker in raw]
            if name == "api.html":
                documented = set(page.evaluate(
                    "() => Array.from(document.querySelectorAll('dt.sig[id]')).map(d => d.id)"))
                seen += [f"does not document {n}" for n in API_NAMES if n not in documented]
            broken = page.evaluate("""() => Array.from(document.images)
                .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)""")
            seen += [f"image not drawn: {src}" for src in broken]
            page.screenshot(path=str(shots / (name.replace("/", "_") + ".png")), full_page=False)
            problems += [f"{name}: {problem}" for problem in seen]
            page.close()
        browser.close()
    server.shutdown()
    return problems, len(pages)


def main(argv):
    site = pathlib.Path(argv[1] if len(argv) > 1 else "docs/_build/html").resolve()
    if not (site / "index.html").exists():
        sys.exit(f"check_site: no built site at {site} (build it first)")
    problems, external = check_links(site)
    browser_problems, opened = check_in_browser(site, site.parent / "screenshots")
    problems += browser_problems
    print(f"check_site: {sum(1 for _ in site.rglob('*.html'))} pages' links checked "
          f"({len(external)} external links, not followed); {opened} pages opened in "
          f"Chromium; screenshots in {site.parent / 'screenshots'}")
    for problem in problems:
        print("  " + problem)
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv)
