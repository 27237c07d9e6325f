"""The web dashboard `piestream serve` runs beside pgwire (127.0.0.1:5691 by default, as
RisingWave's): server-rendered HTML with inline SVG, no JavaScript framework.

- `model`: what the pages show, read from the running `Database` (catalog, fragments, the
  barrier manager's epoch statistics, the Hummock version, backfill state);
- `svg`: the fragment graph and the epoch timeline as SVG;
- `pages`: the HTML pages; `server`: the HTTP server thread.
"""

from piestream.server.dashboard.server import DEFAULT_DASHBOARD_PORT, Dashboard

__all__ = ["DEFAULT_DASHBOARD_PORT", "Dashboard"]
