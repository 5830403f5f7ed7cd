//! Tests of the client-go layer (crate `sample-client-go`): client, cache, work queue, events, leader election.

mod cache_convergence;
mod cache_end_to_end;
mod config;
mod flow_control;
mod http;
mod informer;
mod informer_unit;
mod leaderelection_elector;
mod leaderelection_lease;
mod record_correlator;
mod record_pipeline;
mod record_sink;
mod reflector;
mod typed_client;
mod verbs;
mod watch_props;
mod workqueue_delaying;
mod workqueue_metrics;
mod workqueue_queue;
mod workqueue_rate_limiting;
mod workqueue_tasks;
