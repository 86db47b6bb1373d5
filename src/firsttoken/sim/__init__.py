"""The simulated region: a data centre on a laptop (catalogue, roofline timings, engine)."""
