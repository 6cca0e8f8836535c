package devcluster

import "testing"

func TestDatabaseHint(t *testing.T) {
	for _, tc := range []struct {
		name, raw       string
		throwaway       bool
		wantShown, want string
	}{
		{
			name: "throwaway server, trust authentication: shown whole", throwaway: true,
			raw:       "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable",
			wantShown: "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable",
			want:      `psql "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable"`,
		},
		{
			name:      "given URL: password redacted, psql reads the variable",
			raw:       "postgres://app:s3cret@db.example:5432/shop?sslmode=require",
			wantShown: "postgres://app:xxxxx@db.example:5432/shop?sslmode=require",
			want:      `psql "$DATABASE_URL"`,
		},
		{
			name:      "given URL with the password as a parameter",
			raw:       "postgres://app@db.example/shop?password=s3cret",
			wantShown: "postgres://app@db.example/shop?password=xxxxx",
			want:      `psql "$DATABASE_URL"`,
		},
		{
			name:      "keyword/value string with a password",
			raw:       "host=db.example user=app password=s3cret",
			wantShown: "(from $DATABASE_URL, not shown: it may hold a password)",
			want:      `psql "$DATABASE_URL"`,
		},
		{
			name:      "keyword/value string without one",
			raw:       "host=/run/postgresql dbname=shop",
			wantShown: "host=/run/postgresql dbname=shop",
			want:      `psql "$DATABASE_URL"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shown, psql := databaseHint(tc.raw, tc.throwaway, "DATABASE_URL", "psql")
			if shown != tc.wantShown || psql != tc.want {
				t.Errorf("databaseHint(%q) = %q, %q; want %q, %q", tc.raw, shown, psql, tc.wantShown, tc.want)
			}
		})
	}
}
