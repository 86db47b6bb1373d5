"""What tokens and GPU-hours cost: the tables firsttoken ships (a provider's price per million tokens by
model, a GPU-hour by GPU and place, each row with its source and date), read by the planner and by the
gateway's spend accounting alike."""
