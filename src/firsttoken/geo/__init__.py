"""Where things are: places (cities, cloud regions) and the physics of the distance between them."""
