//! Keyspaces: independent key spaces of one database, each with its own levels, logs and
//! options, written together atomically by one batch, created and dropped at run time.
//!
//! Run: `cargo run -p hybridkv --example keyspaces`

use hybridkv::{Db, Options, Placement, WriteBatch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    {
        let db = Db::open(dir.path(), Options::default())?;
        // Accounts with the default placement; an audit trail whose values all go to its
        // own value log (keys and pointers only in its tree).
        let accounts = db.create_keyspace("accounts", Options::default())?;
        let audit = db.create_keyspace(
            "audit",
            Options {
                placement: Placement::AllLog,
                ..Options::default()
            },
        )?;
        accounts.put("alice", "100")?;
        accounts.put("bob", "50")?;

        // A transfer and its audit record: one batch, atomic across the keyspaces (after
        // any crash, all three writes are there or none is).
        let mut batch = WriteBatch::new();
        batch
            .put_in(&accounts, "alice", "70")
            .put_in(&accounts, "bob", "80")
            .put_in(&audit, "0001", "alice -> bob: 30");
        db.write(batch)?;

        // A view of both keyspaces at one point.
        let views = db.consistent_snapshots(&[&accounts, &audit])?;
        println!(
            "alice {:?}, audit {:?}",
            views[0].get("alice")?.map(String::from_utf8),
            views[1].get("0001")?.map(String::from_utf8)
        );
        // The keyspaces do not see each other's keys, nor the default keyspace's.
        assert_eq!(audit.get("alice")?, None);
        assert_eq!(db.get("alice")?, None);

        // A scratch keyspace: dropping it deletes its files at once.
        let scratch = db.create_keyspace("scratch", Options::default())?;
        scratch.put("tmp", vec![0u8; 1 << 20])?;
        db.drop_keyspace("scratch")?;
        assert!(scratch.get("tmp").is_err()); // its handles fail from now on
    }
    // Reopened: every keyspace is there, with the options it was created with.
    let db = Db::open(dir.path(), Options::default())?;
    println!("keyspaces after reopen: {:?}", db.keyspace_names());
    assert_eq!(db.keyspace_names(), vec!["accounts", "audit"]);
    let accounts = db.keyspace("accounts")?;
    assert_eq!(accounts.get("bob")?.as_deref(), Some(&b"80"[..]));
    assert_eq!(
        db.keyspace("audit")?.get("0001")?.as_deref(),
        Some(&b"alice -> bob: 30"[..])
    );
    Ok(())
}
