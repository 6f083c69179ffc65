//! `delete` through the router: the statement routing of [`super::update`] (a `limit: 0`
//! statement goes to every targeted shard; a `limit: 1` one without the shard key deletes one
//! matching document chosen on the router).

use std::sync::Arc;

use bson::Document;

use crate::error::ClusterResult;
use crate::router::command::update::{run_statements, StatementKind};
use crate::router::context::RouterContext;
use crate::router::request::RouterRequest;

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    run_statements(context, request, StatementKind::Delete).await
}
