//! One connection type for a standalone Redis (or a cluster-mode-disabled
//! replication group's primary endpoint) and for Redis Cluster
//! (`REDIS_CLUSTER=true`: ElastiCache cluster mode, MemoryDB). Commands go
//! where their first key's hash slot lives; in cluster mode the store keeps
//! every key of a function in one slot (a `{tag}` in the names, see
//! [`super::connect::RedisSettings::check_names`]), so a script's keys, a
//! pipeline's commands and `WAIT` all reach the same primary.

use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::OnceCell;

/// A container's connection to Redis; clones share it.
#[derive(Clone)]
pub enum RedisConnection {
    /// One server, multiplexed, reconnecting by itself.
    Single(ConnectionManager),
    /// A cluster, connected on first use (the slot map read then).
    Cluster {
        /// The cluster's client (its seed node and settings).
        client: Arc<ClusterClient>,
        /// The connection, once the first command has opened it.
        connection: Arc<OnceCell<ClusterConnection>>,
    },
}

impl RedisConnection {
    /// A cluster connection through `client`, opened by the first command.
    pub fn cluster(client: ClusterClient) -> Self {
        Self::Cluster {
            client: Arc::new(client),
            connection: Arc::default(),
        }
    }

    /// `command` on the primary that holds `key`'s hash slot: for commands
    /// without a key (`WAIT`, `SCAN`) that must reach that node.
    pub async fn on_node_of(&mut self, key: &str, command: &Cmd) -> RedisResult<Value> {
        match self {
            Self::Single(connection) => command.query_async(connection).await,
            Self::Cluster { .. } => {
                let mut connection = self.cluster_connection().await?;
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                connection.route_command(command.clone(), routing).await
            }
        }
    }

    async fn cluster_connection(&self) -> RedisResult<ClusterConnection> {
        match self {
            Self::Cluster { client, connection } => connection
                .get_or_try_init(|| client.get_async_connection())
                .await
                .cloned(),
            Self::Single(_) => Err((redis::ErrorKind::Client, "not a cluster").into()),
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            Self::Cluster { .. } => Box::pin(async move {
                let mut connection = self.cluster_connection().await?;
                connection.req_packed_command(cmd).await
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster { .. } => Box::pin(async move {
                let mut connection = self.cluster_connection().await?;
                connection
                    .req_packed_commands(pipeline, offset, count)
                    .await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}
