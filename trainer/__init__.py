"""Contrastive finetuning with hard-negative columns, under Accelerate and DeepSpeed."""
