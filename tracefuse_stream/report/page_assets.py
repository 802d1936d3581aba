"""The report page's fixed parts: its HTML head, style sheet and script (report/page.py
fills in the data). Kept apart so that page.py holds the logic and this file the
page's text; the script (page.js, with page_maps.js for the heatmap and the per-host
map) draws the maps and the why charts as SVG from the embedded ``info --collectives
--json`` object, with no fetch of any kind."""

# ruff: noqa: E501

from importlib import resources

_HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>@TITLE@</title>
<style>@CSS@</style>
</head>
<body>
<noscript><p>This page draws itself with JavaScript; the data is in the
<code>tracefuse-report</code> script element (the <code>info --collectives --json</code> object).</p></noscript>
<main id="app"></main>
<div id="tip" role="tooltip"></div>
<script type="application/json" id="tracefuse-report">@DATA@</script>
<script>@JS@</script>
</body>
</html>
"""

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#1d1d1f;
margin:0;background:#fff}
main{max-width:1180px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:20px;margin:0 0 2px}h2{font-size:16px;margin:28px 0 6px;border-bottom:1px solid #ddd;padding-bottom:3px}
h3{font-size:14px;margin:16px 0 4px}
.sub{color:#555;font-size:12.5px}.muted{color:#777}.na{color:#8a6d00;background:#fff8db;padding:1px 5px;border-radius:3px}
#verdict{font-size:17px;font-weight:600;margin:12px 0 4px;padding:10px 12px;background:#f6f2ff;border-left:4px solid #6a3db8}
#verdict.none{background:#eef7ee;border-left-color:#2f8f46}
#verdict.unassessed{background:#fff4e0;border-left-color:#c77700}
pre{background:#f4f4f4;padding:8px 10px;overflow-x:auto;font-size:12.5px;margin:4px 0;white-space:pre-wrap;word-break:break-all}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}th,td{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
th{background:#fafafa;font-weight:600}td.l,th.l{text-align:left}
svg{display:block;font-size:10px}#heatmap,#hostmap{shape-rendering:crispEdges}
.lazy{content-visibility:auto;contain-intrinsic-size:auto 900px}svg text{fill:#333}
.ctl{margin:6px 0;font-size:13px}.ctl label{margin-right:14px;cursor:pointer}.ctl label.off{color:#999;cursor:default}
#tip{position:fixed;pointer-events:none;background:rgba(25,25,30,.92);color:#fff;font-size:12px;padding:5px 8px;
border-radius:4px;display:none;white-space:pre;z-index:9;max-width:520px}
.card{border:1px solid #e3e3e3;border-radius:4px;padding:6px 10px;margin:8px 0}
.warn{color:#9a3412}.legend{display:flex;align-items:flex-start;gap:10px}.legend svg{flex:none}
#diff-summary{font-size:15px;margin:8px 0 4px;padding:8px 12px;background:#fdf0f0;border-left:4px solid #b2182b}
#diff-summary.none{background:#eef7ee;border-left-color:#2f8f46}
"""


def _script() -> str:
    """report/page.js with report/page_maps.js (the heatmap and the per-host map) at its
    ``// @MAPS@`` line: one script, one closure; two files a reader can hold."""
    here = resources.files("tracefuse_stream.report")
    page = (here / "page.js").read_text(encoding="utf-8")
    maps = (here / "page_maps.js").read_text(encoding="utf-8")
    head, marker, tail = page.partition("// @MAPS@")
    if not marker:
        raise RuntimeError("report/page.js has no // @MAPS@ line for report/page_maps.js")
    return "\n" + head + maps + tail.partition("\n")[2]


#: the page's script (report/page.js and page_maps.js, shipped in the wheel as package data)
_JS = _script()


__all__ = ["_CSS", "_HEAD", "_JS"]
