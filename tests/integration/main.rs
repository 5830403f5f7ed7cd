//! Every integration test of the crate, in one test binary.
//!
//! Each `*.rs` file beside this one is a module holding the tests of one area (the embedded API
//! server, the client, the cache, the work queue, events and leader election, the manager, the
//! operators); the `*_support` modules are the helpers those areas share. They run against the
//! embedded API server over real HTTP(S).
//!
//! Why one binary instead of one per file: every integration-test binary links the whole crate
//! and its dependencies, about 280 MB each with debug info. Forty-odd binaries cost many
//! gigabytes of disk and minutes of linking on a fresh machine; one costs one link. Isolation is
//! unchanged under `cargo nextest`, which runs every test in its own process. Select an area with
//! a filter: `cargo nextest run -E 'test(/^workqueue_/)'` or `cargo nextest run workqueue_queue::`.
// Helpers shared between areas.
mod apiserver_support;
mod at_support;
mod client_support;
mod cluster_support;
mod net_support;
mod operators_support;
mod record_support;
mod seeds_support;

// The areas.
mod apiserver_admission;
mod apiserver_auth_review;
mod apiserver_bounded;
mod apiserver_cel;
mod apiserver_client;
mod apiserver_cluster_faults;
mod apiserver_cluster_gc;
mod apiserver_cluster_node;
mod apiserver_cluster_process;
mod apiserver_cluster_rbac;
mod apiserver_cluster_standalone;
mod apiserver_cluster_workloads;
mod apiserver_conversion;
mod apiserver_durable;
mod apiserver_exec;
mod apiserver_fidelity;
mod apiserver_flowcontrol;
mod apiserver_http;
mod apiserver_kubectl;
mod apiserver_kubectl_compat;
mod apiserver_list_snapshot;
mod apiserver_spdy;
mod apiserver_standalone;
mod apiserver_trust;
mod apiserver_watch;
mod at_controller;
mod at_otlp;
mod at_requests;
mod at_scale;
mod at_traces;
mod at_undecodable;
mod cache_apiserver;
mod cache_convergence;
mod cache_embedded;
mod cache_informer;
mod cache_reflector;
mod client_apiserver;
mod client_config;
mod client_flow_control;
mod client_http;
mod client_watch_props;
mod crd_schemas;
mod demo_command;
mod docs_blocks;
mod flags_doc;
mod helm_chart;
mod leaderelection_apiserver;
mod leaderelection_elector;
mod manager_cli;
mod manager_conversion;
mod manager_handles;
mod manager_health;
mod manager_leader_election;
mod manager_page;
mod manager_rbac;
mod manager_trace;
mod manager_webhook;
mod metrics_secure;
mod metrics_server;
mod operators_demo;
mod operators_manager_rbac;
mod operators_myapp_foo;
mod operators_rediscluster;
mod operators_seed_book_at;
mod operators_seed_myapp;
mod operators_seed_rediscluster;
mod operators_seed_tdset;
mod operators_tdset;
mod record_apiserver;
mod record_correlator_props;
mod record_pipeline;
mod serving_flood;
mod sharding;
mod workqueue_delaying;
mod workqueue_metrics;
mod workqueue_queue;
mod workqueue_rate_limiting;
mod workqueue_tasks;
mod workspace_modules;
