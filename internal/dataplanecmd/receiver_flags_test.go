package dataplanecmd

import "testing"

// TestGroupCommitPredictFlag: --group-commit-predict=false turns predicted groups off
// (receipt.GroupCommit.NoPrediction); the flag's default keeps them on.
func TestGroupCommitPredictFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool // NoPrediction
	}{
		{nil, false}, // on by default
		{[]string{"--group-commit-predict=false"}, true},
		{[]string{"--group-commit-predict=true"}, false},
	} {
		cmd := Receiver()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		predict, err := cmd.Flags().GetBool("group-commit-predict")
		if err != nil {
			t.Fatal(err)
		}
		g, err := receiverFlags{groupPredict: predict}.groupCommit()
		if err != nil {
			t.Fatal(err)
		}
		if g.NoPrediction != tc.want {
			t.Errorf("%v: NoPrediction %v, want %v", tc.args, g.NoPrediction, tc.want)
		}
	}
}
