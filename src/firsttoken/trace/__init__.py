"""`firsttoken trace`: the journey X-ray of one endpoint, measured from where the caller is."""
