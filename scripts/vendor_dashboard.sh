#!/usr/bin/env bash
# The dashboard's third-party files, copied from their npm packages into the Python package (no CDN and
# no build step at run time). Re-run to update; the versions are pinned here and the files' sha256 are in
# src/firsttoken/dashboard/assets/vendor/SOURCES.
#   uPlot 1.6.32 (MIT): time series, 50 KB, canvas; drawn fast enough for thousands of points a second.
#   world-atlas 2.0.2 (ISC; the data is Natural Earth 1:110m land, public domain): the map's outline.
#   topojson-client 3.1.0 (ISC): turns that TopoJSON into GeoJSON in the browser (7 KB).
set -euo pipefail
cd "$(dirname "$0")/.."
out=src/firsttoken/dashboard/assets/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent uplot@1.6.32 world-atlas@2.0.2 topojson-client@3.1.0 >/dev/null)
for tgz in "$work"/*.tgz; do mkdir -p "${tgz%.tgz}" && tar xzf "$tgz" -C "${tgz%.tgz}"; done
cp "$work"/uplot-1.6.32/package/dist/uPlot.iife.min.js "$work"/uplot-1.6.32/package/dist/uPlot.min.css "$out"/
cp "$work"/uplot-1.6.32/package/LICENSE "$out"/LICENSE.uPlot
cp "$work"/world-atlas-2.0.2/package/land-110m.json "$out"/
cp "$work"/world-atlas-2.0.2/package/LICENSE "$out"/LICENSE.world-atlas
cp "$work"/topojson-client-3.1.0/package/dist/topojson-client.min.js "$out"/
cp "$work"/topojson-client-3.1.0/package/LICENSE "$out"/LICENSE.topojson-client
{
  echo "uplot 1.6.32 (MIT), world-atlas 2.0.2 (ISC; Natural Earth 1:110m land, public domain),"
  echo "topojson-client 3.1.0 (ISC), from npm by scripts/vendor_dashboard.sh"
  (cd "$out" && sha256sum uPlot.iife.min.js uPlot.min.css land-110m.json topojson-client.min.js)
} > "$out"/SOURCES
