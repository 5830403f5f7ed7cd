//! Tests of the operators (crate `sample-operators`): At, TDSet, RedisCluster, MyApp, Foo, and the seeds' walkthroughs.

mod at_controller;
mod at_otlp;
mod at_requests;
mod at_scale;
mod at_traces;
mod at_undecodable;
mod crd_schemas;
mod demo;
mod manager_rbac;
mod myapp_foo;
mod rediscluster;
mod seed_book_at;
mod seed_myapp;
mod seed_rediscluster;
mod seed_tdset;
mod tdset;
