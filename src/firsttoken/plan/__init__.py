"""`firsttoken plan`: a scenario's users, workload and options, run through the simulated region's engine in
virtual time, and the journey each request would have, end to end."""
