"""Brain workers: run task phases and inference, commit outcomes. (Later issue.)"""
