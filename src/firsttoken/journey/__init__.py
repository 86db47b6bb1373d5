"""The journey of a request: its timeline and what each phase cost."""
