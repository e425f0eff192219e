"""`python -m trainer RECIPE [key.sub=value ...]`: the same program as `trainer/train.py`;
`python -m trainer export CHECKPOINT --out DIR`: open_clip's local-dir form (trainer/export.py)."""
import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["export"]:
        from compclip.trainer.export import main as export
        sys.exit(export(sys.argv[2:]))
    from compclip.trainer.train import main
    sys.exit(main())
