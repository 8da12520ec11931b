-- Until when a fleet task's lease counts as confirmed for an attempt to start (docs/fleet.md): the claim
-- that took it, and each renewal while it waits, confirm it for a short window; an attempt's end clears
-- it, so each attempt starts on a confirmation. The local claim takes a fleet task only inside its window:
-- an unconfirmed one is simply not claimable (store/claim.py), never a claim rolled back.
ALTER TABLE fleet_leases ADD COLUMN confirmed_until TEXT;
