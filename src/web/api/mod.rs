//! JSON API handlers, grouped by resource.

pub mod admin;
pub mod audit;
pub mod budgets;
pub mod cluster;
pub mod data;
pub mod dead_letter;
pub mod groups;
pub mod health;
pub mod instances;
pub mod maintenance;
pub mod openapi;
pub mod reload;
pub mod schema;
pub mod settings;
pub mod sink;
