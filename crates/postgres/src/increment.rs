//! An [`Increment`] as ONE SQL statement: every number of the row added in
//! one `UPDATE` (or an `INSERT ... ON CONFLICT DO UPDATE` when an absent
//! row, all zeros, may be created), under the floors' condition. A refused
//! increment changes no row, which refuses its transaction.

use std::collections::HashMap;

use super::rows::quote_identifier;
use super::transaction::Statement;
use super::{PostgresStore, SqlValue};
use exactly_once_core::store::{Increment, StoreError, increment};

/// The statement of a (merged) increment: `$1` the row's key, then each
/// add's amount, then each floor's least value before the add.
pub(super) fn increment_statement(increment: &Increment) -> Result<Statement<'static>, StoreError> {
    let ident = |name: &str| {
        quote_identifier(name).map_err(|message| StoreError::Rejected {
            operation: "increment",
            message,
        })
    };
    let table = ident(&increment.table)?;
    let key = ident(&increment.key_name)?;
    let mut params: Vec<SqlValue> = vec![increment.key.as_str().into()];
    let mut columns = Vec::new();
    let mut floors = Vec::new();
    // An absent row counts as all zeros: it may be created only if zero
    // keeps every floor.
    let mut creatable = true;
    for add in &increment.adds {
        let column = ident(&add.attribute)?;
        params.push(add.by.into());
        let by = params.len();
        columns.push((column, by));
        if let Some(least) = add.least_before() {
            creatable &= least <= 0;
            let Ok(least) = i64::try_from(least) else {
                // Below i64::MIN every value keeps the floor; above i64::MAX
                // none does.
                if least > 0 {
                    floors.push("false".to_owned());
                }
                continue;
            };
            params.push(least.into());
            floors.push(format!(
                "COALESCE(row.{}, 0) >= ${}",
                columns.last().map_or("", |c| &c.0),
                params.len()
            ));
        }
    }
    let sets: Vec<String> = columns
        .iter()
        .map(|(column, by)| format!("{column} = COALESCE(row.{column}, 0) + ${by}"))
        .collect();
    // Invariant: every number after the add stays at least its floor (the
    // stored value is at least floor - by); otherwise no row changes.
    let condition = match floors.is_empty() {
        true => "true".to_owned(),
        false => floors.join(" AND "),
    };
    let sql = match creatable {
        true => {
            let names: Vec<&str> = columns.iter().map(|(c, _)| c.as_str()).collect();
            let values: Vec<String> = columns.iter().map(|(_, by)| format!("${by}")).collect();
            format!(
                "INSERT INTO {table} AS row ({key}, {}) VALUES ($1, {}) \
                 ON CONFLICT ({key}) DO UPDATE SET {} WHERE {condition} RETURNING 1",
                names.join(", "),
                values.join(", "),
                sets.join(", ")
            )
        }
        false => format!(
            "UPDATE {table} AS row SET {} WHERE row.{key} = $1 AND {condition} RETURNING 1",
            sets.join(", ")
        ),
    };
    Ok(Statement::new(sql, params))
}

impl PostgresStore {
    /// The numbers of `increment`'s row as they are now (missing: 0), read
    /// after a refusal so that the engine can tell which message overdraws.
    pub(super) async fn numbers_now(
        &self,
        client: &tokio_postgres::Client,
        increment: &Increment,
    ) -> Option<HashMap<String, i128>> {
        let table = quote_identifier(&increment.table).ok()?;
        let key = quote_identifier(&increment.key_name).ok()?;
        let columns: Vec<String> = increment
            .adds
            .iter()
            .map(|add| quote_identifier(&add.attribute).map(|c| format!("{c}::BIGINT")))
            .collect::<Result<_, _>>()
            .ok()?;
        let sql = format!(
            "SELECT {} FROM {table} WHERE {key} = $1",
            columns.join(", ")
        );
        let key: SqlValue = increment.key.as_str().into();
        let rows = client
            .query_typed(&sql, &[(&key, key.sql_type())])
            .await
            .ok()?;
        increment
            .adds
            .iter()
            .enumerate()
            .map(|(i, add)| {
                let value = match rows.first() {
                    None => 0,
                    Some(row) => row.try_get::<_, Option<i64>>(i).ok()?.unwrap_or(0),
                };
                Some((add.attribute.clone(), i128::from(value)))
            })
            .collect()
    }

    /// `increment` alone, committed at once.
    pub(super) async fn apply_increment(&self, increment: &Increment) -> Result<(), StoreError> {
        let statement = increment_statement(increment)?;
        match self.run("increment", &statement).await?.affected {
            0 => Err(StoreError::EffectConditionFailed {
                effect: 0,
                message: increment::BELOW_FLOOR.to_owned(),
            }),
            _ => Ok(()),
        }
    }
}
