"""Spend: what each request cost (tokens from the upstream's own usage, priced from prices/), what the edge
saved (a cache hit, a joined request, a task sized down), each key's spend by day and month in a ledger
that survives a crash, and the budgets that refuse a key past its limit."""
