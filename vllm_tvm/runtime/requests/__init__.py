"""Requests and their sequences: the types every room of the runtime shares (a completion in
flight, what one step schedules of it, its outputs and stop rules), below the rooms that
move them around, so none of those reaches up to the engine for them."""
