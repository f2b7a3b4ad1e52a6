"""The switch's parts, each a stage of the tick (docs/DESIGN.md "A tick"): the class FIFOs
as rings of packet runs (`queue`), the per-flow queues (`flowqueue`), the buffer policies
that admit or drop (`buffer`), the queueing disciplines that mark, drop and pick the
departing queue (`disciplines`), and the scheduler across classes (`scheduler`)."""
