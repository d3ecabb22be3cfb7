//! Runs the `raw_capture` example (tests/examples/raw_capture.rs): the
//! capture convenience layer (`hca_driver::capture`) on two emulated
//! HCAs, every frame sent captured in order through the repost loop, the
//! loop's figures right, and a loop with no traffic ending on its timeout.

#[path = "../examples/raw_capture.rs"]
mod example;

#[test]
fn the_raw_capture_example_captures_every_frame_in_order() {
    // More frames than receive buffers: the loop reposts.
    let (stats, seen) = example::run(100).unwrap();
    assert_eq!(seen, (0..100).collect::<Vec<u32>>());
    assert_eq!(stats.frames, 100);
    assert_eq!(stats.errors, 0);
    assert!(!stats.timed_out);
    assert!(stats.bytes >= 100 * 60);
}

#[test]
fn a_loop_without_traffic_ends_on_its_timeout() {
    let (stats, seen) = example::run(0).unwrap();
    assert!(seen.is_empty());
    assert_eq!(stats.frames, 0);
    assert!(stats.timed_out);
}
