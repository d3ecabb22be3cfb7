//! # hca-driver: the mlx5 control plane and the verbs API
//!
//! `#![no_std]`. Takes a ConnectX from power-on to a ready HCA through the
//! firmware command interface (command queue executor, bring-up and teardown
//! in PRM order, firmware page supply and reclaim, event queues and
//! asynchronous events, health monitor) and offers the resources of the verbs
//! API over it: protection domains, memory regions, completion queues, queue
//! pairs and shared receive queues, with the data path in `verbs-core`.
#![no_std]
