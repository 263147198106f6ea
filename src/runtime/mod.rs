//! Runtime: the main loop, worker threads and tracker thread around the pure core.
