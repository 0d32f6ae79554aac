package tracking_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

const acct = "acct_1Nv0FGQ9RKHgCVdK"

// rawPurchase inserts a purchase with raw SQL and returns its id and account.
func rawPurchase(t *testing.T, pool *pgxpool.Pool) (uuid.UUID, uuid.UUID) {
	t.Helper()
	id, account := uuid.New(), uuid.New()
	_, err := pool.Exec(context.Background(),
		`INSERT INTO purchases (id, account, stripe_account, kind) VALUES ($1, $2, $3, 'legacy')`, id, account, acct)
	require.NoError(t, err)
	return id, account
}

// refused asserts that err is the database refusing a transition.
func refused(t *testing.T, err error, table string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a postgres error, got %v", err)
	assert.Equal(t, "23514", pgErr.Code, pgErr.Message)
	assert.Equal(t, table+"_transition", pgErr.ConstraintName)
}

// TestDatabaseRefusesIllegalTransitions drives every state pair of the three
// machines through raw SQL: only the arrows of the diagrams are accepted.
func TestDatabaseRefusesIllegalTransitions(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()

	type pair struct{ from, to string }
	machines := []struct {
		table  string
		states []string
		legal  map[pair]bool
	}{
		{"payments", []string{"new", "paid", "failed"}, map[pair]bool{
			// failed -> paid: a PaymentIntent that failed and later succeeds
			// (migration 00011, a deviation from reference 004's diagram).
			{"new", "paid"}: true, {"new", "failed"}: true, {"failed", "paid"}: true,
		}},
		{"subscriptions", []string{"new", "active", "terminated"}, map[pair]bool{
			{"new", "active"}: true, {"active", "terminated"}: true, {"new", "terminated"}: true,
		}},
	}
	for _, m := range machines {
		for _, from := range m.states {
			for _, to := range m.states {
				t.Run(m.table+" "+from+"->"+to, func(t *testing.T) {
					purchase, account := rawPurchase(t, pool)
					id := "pi_" + uuid.NewString()[:8]
					if m.table == "subscriptions" {
						id = "sub_" + uuid.NewString()[:8]
					}
					_, err := pool.Exec(ctx, `INSERT INTO `+m.table+` (id, account, stripe_account, purchase) VALUES ($1, $2, $3, $4)`,
						id, account, acct, purchase)
					require.NoError(t, err)
					// Reach `from` along legal arrows.
					path := map[string][]string{"new": nil, "paid": {"paid"}, "failed": {"failed"},
						"active": {"active"}, "terminated": {"terminated"}}[from]
					for _, s := range path {
						_, err := pool.Exec(ctx, `UPDATE `+m.table+` SET status = $2 WHERE id = $1`, id, s)
						require.NoError(t, err)
					}
					_, err = pool.Exec(ctx, `UPDATE `+m.table+` SET status = $2 WHERE id = $1`, id, to)
					if from == to || m.legal[pair{from, to}] {
						assert.NoError(t, err)
					} else {
						refused(t, err, m.table)
					}
				})
			}
		}
		t.Run(m.table+" born in a later state", func(t *testing.T) {
			purchase, account := rawPurchase(t, pool)
			id, state := "pi_born", "paid"
			if m.table == "subscriptions" {
				id, state = "sub_born", "active"
			}
			_, err := pool.Exec(ctx, `INSERT INTO `+m.table+` (id, account, stripe_account, purchase, status) VALUES ($1, $2, $3, $4, $5)`,
				id, account, acct, purchase, state)
			refused(t, err, m.table)
		})
		t.Run(m.table+" identity is immutable", func(t *testing.T) {
			purchase, account := rawPurchase(t, pool)
			other, _ := rawPurchase(t, pool)
			id := "pi_ident"
			if m.table == "subscriptions" {
				id = "sub_ident"
			}
			_, err := pool.Exec(ctx, `INSERT INTO `+m.table+` (id, account, stripe_account, purchase) VALUES ($1, $2, $3, $4)`,
				id, account, acct, purchase)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `UPDATE `+m.table+` SET purchase = $2 WHERE id = $1`, id, other)
			refused(t, err, m.table)
			_, err = pool.Exec(ctx, `UPDATE `+m.table+` SET stripe_account = 'acct_other' WHERE id = $1`, id)
			refused(t, err, m.table)
		})
		t.Run(m.table+" belongs to its purchase's account", func(t *testing.T) {
			purchase, _ := rawPurchase(t, pool)
			id := "pi_owner"
			if m.table == "subscriptions" {
				id = "sub_owner"
			}
			_, err := pool.Exec(ctx, `INSERT INTO `+m.table+` (id, account, stripe_account, purchase) VALUES ($1, $2, $3, $4)`,
				id, uuid.New(), acct, purchase)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			assert.Equal(t, "23503", pgErr.Code, "foreign key violation")
		})
	}

	t.Run("purchases", func(t *testing.T) {
		tests := []struct {
			name string
			sql  string
			ok   bool
		}{
			{"new -> fulfilled", `UPDATE purchases SET fulfilled = true, fulfilled_at = now() WHERE id = $1`, true},
			{"fulfilled without a time", `UPDATE purchases SET fulfilled = true WHERE id = $1`, false},
			{"record a Stripe id", `UPDATE purchases SET payment_intent = 'pi_1' WHERE id = $1`, true},
			{"change the kind", `UPDATE purchases SET kind = 'recurring' WHERE id = $1`, false},
			{"change the account", `UPDATE purchases SET account = gen_random_uuid() WHERE id = $1`, false},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				id, _ := rawPurchase(t, pool)
				_, err := pool.Exec(ctx, tc.sql, id)
				if tc.ok {
					assert.NoError(t, err)
				} else {
					assert.Error(t, err)
				}
			})
		}
		id, _ := rawPurchase(t, pool)
		_, err := pool.Exec(ctx, `UPDATE purchases SET fulfilled = true, fulfilled_at = now(), payment_intent = 'pi_1' WHERE id = $1`, id)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE purchases SET fulfilled = false, fulfilled_at = NULL WHERE id = $1`, id)
		refused(t, err, "purchases")
		_, err = pool.Exec(ctx, `UPDATE purchases SET fulfilled_at = now() - interval '1 day' WHERE id = $1`, id)
		refused(t, err, "purchases")
		_, err = pool.Exec(ctx, `UPDATE purchases SET payment_intent = 'pi_2' WHERE id = $1`, id)
		refused(t, err, "purchases")
		_, err = pool.Exec(ctx, `INSERT INTO purchases (id, account, stripe_account, kind, fulfilled, fulfilled_at)
			VALUES (gen_random_uuid(), gen_random_uuid(), $1, 'legacy', true, now())`, acct)
		refused(t, err, "purchases")
	})
}

func TestDatabaseMaintainsLastUpdated(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	purchase, account := rawPurchase(t, pool)
	_, err := pool.Exec(ctx, `INSERT INTO payments (id, account, stripe_account, purchase, created, last_updated)
		VALUES ('pi_lu', $1, $2, $3, now() - interval '1 hour', now() - interval '2 hours')`, account, acct, purchase)
	require.NoError(t, err)
	var created, updated time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT created, last_updated FROM payments WHERE id = 'pi_lu'`).Scan(&created, &updated))
	assert.Equal(t, created, updated, "a new row was last updated when it was created")

	// A no-op update leaves last_updated alone; a real one moves it to now,
	// even if the statement tries to set it.
	_, err = pool.Exec(ctx, `UPDATE payments SET status = status WHERE id = 'pi_lu'`)
	require.NoError(t, err)
	var again time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_updated FROM payments WHERE id = 'pi_lu'`).Scan(&again))
	assert.Equal(t, updated, again)
	_, err = pool.Exec(ctx, `UPDATE payments SET status = 'paid', last_updated = '2000-01-01' WHERE id = 'pi_lu'`)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_updated FROM payments WHERE id = 'pi_lu'`).Scan(&again))
	assert.WithinDuration(t, time.Now(), again, time.Minute)
}
