"""The HTTP service and the thread wiring behind `wq daemon`."""
