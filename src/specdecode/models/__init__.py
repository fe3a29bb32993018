"""Models: specs and the bundled pair, loading, the runners (backends/), and the draft, dtype and
shortlist choices made by measurement."""
