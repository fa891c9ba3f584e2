"""The papers hf_cse implements, as data: losses and method models point at these (their ``references``
attribute), and model cards cite them from there. Titles, authors, venues and arXiv ids are the checked records
of the papers (not of preprint versions)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CSEError


@dataclass(frozen=True)
class Paper:
    """One paper: what a model card's citation section and a docstring's reference need."""

    key: str  #: short stable identifier (BibTeX key)
    name: str  #: the method's common name, e.g. "GS-InfoNCE"
    title: str
    authors: tuple[str, ...]
    venue: str
    year: int
    arxiv: str
    code: str  #: the authors' public code
    bibtex: str

    @property
    def url(self) -> str:
        return f"https://arxiv.org/abs/{self.arxiv}"

    @property
    def short(self) -> str:
        """``"Wu et al., COLING 2022"``: first author's surname, venue."""
        first = self.authors[0].split()[-1]
        who = first if len(self.authors) == 1 else (
            f"{first} and {self.authors[1].split()[-1]}" if len(self.authors) == 2 else f"{first} et al.")
        return f"{who}, {self.venue}"


SIMCSE = Paper(
    key="gao2021simcse",
    name="SimCSE",
    title="SimCSE: Simple Contrastive Learning of Sentence Embeddings",
    authors=("Tianyu Gao", "Xingcheng Yao", "Danqi Chen"),
    venue="EMNLP 2021",
    year=2021,
    arxiv="2104.08821",
    code="https://github.com/princeton-nlp/SimCSE",
    bibtex="""@inproceedings{gao2021simcse,
  title     = "{SimCSE}: Simple Contrastive Learning of Sentence Embeddings",
  author    = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
  booktitle = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing (EMNLP)},
  year      = {2021},
  eprint    = {2104.08821},
  archivePrefix = {arXiv}
}""",
)

GS_INFONCE = Paper(
    key="wu2022gsinfonce",
    name="GS-InfoNCE",
    title="Smoothed Contrastive Learning for Unsupervised Sentence Embedding",
    authors=("Xing Wu", "Chaochen Gao", "Liangjun Zang", "Jizhong Han", "Zhongyuan Wang", "Songlin Hu"),
    venue="COLING 2022",
    year=2022,
    arxiv="2109.04321",
    code="https://github.com/caskcsg/sentemb",
    bibtex="""@inproceedings{wu2022gsinfonce,
  title     = {Smoothed Contrastive Learning for Unsupervised Sentence Embedding},
  author    = {Wu, Xing and Gao, Chaochen and Zang, Liangjun and Han, Jizhong and Wang, Zhongyuan and Hu, Songlin},
  booktitle = {Proceedings of the 29th International Conference on Computational Linguistics (COLING)},
  year      = {2022},
  eprint    = {2109.04321},
  archivePrefix = {arXiv}
}""",
)

FOCAL_INFONCE = Paper(
    key="hou2023focalinfonce",
    name="Focal-InfoNCE",
    title="Improving Contrastive Learning of Sentence Embeddings with Focal-InfoNCE",
    authors=("Pengyue Hou", "Xingyu Li"),
    venue="Findings of EMNLP 2023",
    year=2023,
    arxiv="2310.06918",
    code="https://github.com/puerrrr/Focal-InfoNCE",
    bibtex="""@inproceedings{hou2023focalinfonce,
  title     = "Improving Contrastive Learning of Sentence Embeddings with {Focal-InfoNCE}",
  author    = {Hou, Pengyue and Li, Xingyu},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2023},
  year      = {2023},
  pages     = {4757--4762},
  doi       = {10.18653/v1/2023.findings-emnlp.315},
  eprint    = {2310.06918},
  archivePrefix = {arXiv}
}""",
)

DIFFCSE = Paper(
    key="chuang2022diffcse",
    name="DiffCSE",
    title="DiffCSE: Difference-based Contrastive Learning for Sentence Embeddings",
    authors=("Yung-Sung Chuang", "Rumen Dangovski", "Hongyin Luo", "Yang Zhang", "Shiyu Chang", "Marin Soljačić",
             "Shang-Wen Li", "Wen-tau Yih", "Yoon Kim", "James Glass"),
    venue="NAACL 2022",
    year=2022,
    arxiv="2204.10298",
    code="https://github.com/voidism/DiffCSE",
    bibtex="""@inproceedings{chuang2022diffcse,
  title     = "{DiffCSE}: Difference-based Contrastive Learning for Sentence Embeddings",
  author    = {Chuang, Yung-Sung and Dangovski, Rumen and Luo, Hongyin and Zhang, Yang and Chang, Shiyu and Solja{\\v c}i{\\'c}, Marin and Li, Shang-Wen and Yih, Wen-tau and Kim, Yoon and Glass, James},
  booktitle = {Proceedings of the 2022 Conference of the North American Chapter of the Association for Computational Linguistics: Human Language Technologies (NAACL)},
  year      = {2022},
  eprint    = {2204.10298},
  archivePrefix = {arXiv}
}""",
)

IMSIMCSE = Paper(
    key="xu2023simcsepp",
    name="ImSimCSE (SimCSE++)",
    title="SimCSE++: Improving Contrastive Learning for Sentence Embeddings from Two Perspectives",
    authors=("Jiahao Xu", "Wei Shao", "Lihui Chen", "Lemao Liu"),
    venue="EMNLP 2023",
    year=2023,
    arxiv="2305.13192",
    code="https://github.com/Jiahao004/SimCSE-plus-plus",
    bibtex="""@inproceedings{xu2023simcsepp,
  title     = "{SimCSE++}: Improving Contrastive Learning for Sentence Embeddings from Two Perspectives",
  author    = {Xu, Jiahao and Shao, Wei and Chen, Lihui and Liu, Lemao},
  booktitle = {Proceedings of the 2023 Conference on Empirical Methods in Natural Language Processing (EMNLP)},
  year      = {2023},
  pages     = {12028--12040},
  eprint    = {2305.13192},
  archivePrefix = {arXiv}
}""",
)

GRADIENT_PARADIGM = Paper(
    key="li2024unifiedgradient",
    name="Unified gradient paradigm",
    title=("Towards Better Understanding of Contrastive Sentence Representation Learning: "
           "A Unified Paradigm for Gradient"),
    authors=("Mingxin Li", "Richong Zhang", "Zhijie Nie"),
    venue="ACL 2024",
    year=2024,
    arxiv="2402.18281",
    code="https://github.com/BDBC-KG-NLP/UnderstandingCSE",
    bibtex="""@inproceedings{li2024unifiedgradient,
  title     = {Towards Better Understanding of Contrastive Sentence Representation Learning: A Unified Paradigm for Gradient},
  author    = {Li, Mingxin and Zhang, Richong and Nie, Zhijie},
  booktitle = {Proceedings of the 62nd Annual Meeting of the Association for Computational Linguistics (ACL)},
  year      = {2024},
  pages     = {14506--14521},
  eprint    = {2402.18281},
  archivePrefix = {arXiv}
}""",
)

#: every paper, by key: the six above and any a loss module adds with :func:`register_paper`
PAPERS: dict[str, Paper] = {p.key: p for p in (SIMCSE, GS_INFONCE, FOCAL_INFONCE, DIFFCSE, IMSIMCSE,
                                                GRADIENT_PARADIGM)}


def register_paper(paper: Paper) -> Paper:
    """Add ``paper`` to :data:`PAPERS` and return it. A loss from a paper not listed here defines the record in its
    own module, ``MY_PAPER = register_paper(Paper(...))``, so a new loss stays one file; a key already taken by a
    different record is an error."""
    known = PAPERS.setdefault(paper.key, paper)
    if known != paper:
        raise CSEError(f"paper key {paper.key!r} is already taken by another record ({known.title!r})")
    return known
